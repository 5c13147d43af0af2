"""Which regions each node may speak for: decided by the server, never by a reply.

A reply lists the regions it covers (`wire.regions`), and a hostile or broken client can
list any: relabel its own update as another region's, or add a copy for one. So the
server fixes, before each round, which partition every node serves, from what the node
cannot choose:

- under the simulation engine every node is a virtual one of the server's own run, and
  the server assigns them (`by_rank`: the nodes in id order serve partitions 0, 1, ...;
  each message names its node's partition, and the ClientApp serves it);
- under the deployment engine with SuperNode authentication (`fedmc deploy`), by the
  node's authenticated key (`by_key`): the SuperLink admits a node only with a
  registered key, and the run config lists each partition's key fingerprint
  (run-config `node-keys`), so a node serves the partition its key was made for.

`impostor` then says why a reply that claims other regions than its node's is refused:
its node's own regions are failed with that reason, and the regions it claimed stay with
the nodes that serve them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from cryptography.hazmat.primitives import serialization


def fingerprint(public_key: bytes) -> str:
    """SHA-256 of a public key's DER SubjectPublicKeyInfo, in hex, whatever its encoding
    (OpenSSH as `fedmc deploy` writes it, PEM as the SuperLink reports it)."""
    data = public_key.strip()
    if data.startswith(b"-----BEGIN"):
        key = serialization.load_pem_public_key(data)
    else:
        key = serialization.load_ssh_public_key(data)
    der = key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(der).hexdigest()


def by_rank(node_ids: Sequence[str]) -> dict[str, int]:
    """Virtual nodes: the `n` nodes in id order serve partitions `0 .. n - 1`."""
    return {node: k for k, node in enumerate(sorted(node_ids))}


def by_key(node_keys: Mapping[str, bytes], fingerprints: Sequence[str]) -> dict[str, int]:
    """Authenticated nodes: each node serves the partition whose key fingerprint its
    public key has; a node with no listed key serves none."""
    partition = {print_: k for k, print_ in enumerate(fingerprints)}
    out = {}
    for node, key in node_keys.items():
        try:
            mine = partition.get(fingerprint(key))
        except ValueError:  # not a key at all: no partition
            continue
        if mine is not None:
            out[node] = mine
    return out


def impostor(node: str, claimed: Sequence[int], serves: Sequence[int]) -> str | None:
    """Why a reply from `node` that lists regions `claimed` is refused when the node
    serves `serves` (this round's regions of its partition), or None when they agree."""
    if list(claimed) == list(serves):
        return None
    return f"node {node} answered for regions {list(claimed)}, it serves {list(serves)}"
