"""Every expected region, every round: a healthy update, or a failure with its reason.

A round's replies come from clients that may each serve several regions, some clients fail
outright (an exception, or no reply within the round timeout) and some replies cannot be
used (they cannot be split into regions, or a region's update has the wrong shapes, holds
NaN, or claims more environment steps than the round's budget). `sort_out` turns all of
that into the healthy updates and one reason per region left out, so that nothing about a
round goes unrecorded and the global model is built from healthy regions only.

Each reason is one line a person reads in metrics.csv and on the console: what Flower
hands the strategy for a failed client (its error reply wrapped in a ValueError, the
client's exception as `<class '...'>:<'...'>`, under the simulation engine a whole Ray
traceback around Flower's ClientAppException) is reduced to the exception that began
it, `Type: message`, and Flower's words for an expired message to the round timeout.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from flwr.common import Scalar

from fedmc_flwr.federation import wire
from fedmc_flwr.federation.aggregation import RegionUpdate, check_update
from fedmc_flwr.federation.bundle import unbundle

REASON_CHARS = 240
"""Longest reason kept in metrics.csv; a longer one is cut and ends with `...`."""


@dataclass
class RoundOutcome:
    """What a round's replies amount to."""

    updates: list[RegionUpdate]
    """Healthy updates, in region order."""
    failed: dict[int, str]
    """Region -> why it was left out of the round."""


FLOWER_ERROR = re.compile(
    r"Message contains an Error \(reason: (?P<reason>.*)\)\. "
    r"It originated during client-side execution of a message\.?",
    re.DOTALL,
)
"""How Flower's client proxy hands the strategy a client's error reply (a ValueError)."""
TYPED = re.compile(r"<class '(?P<kind>[^']*)'>:<'(?P<message>.*)'>", re.DOTALL)
"""How Flower writes the exception a client raised into its error reply."""
STATUS = re.compile(r"Status\(code=<Code\.(?P<code>\w+): -?\d+>, message='(?P<message>.*)'\)")
"""A reply whose status is not OK, as Flower's `Status` prints itself."""
RAISED = re.compile(r"(?P<kind>[A-Za-z_][\w.]*(?:\([\w.]+\))?)(?:: ?(?P<message>.*))?")
"""A traceback's line naming the exception raised (`module.Type: message`)."""
CLIENT_APP = re.compile(r"Exception ClientAppException occurred\. Message: ")
"""Flower's words around what a ClientApp raised, in the simulation engine."""
ANSI = re.compile(r"\x1b\[[0-9;]*m")
WRAPPERS = ("ClientAppException", "RayTaskError")
"""Exception types that only carry another's failure: their name says nothing of it."""


def _kind(name: str) -> str:
    """`pkg.mod.Type` as `Type`, Ray's `RayTaskError(Type)` as `Type`; '' for a wrapper."""
    name = re.sub(r"^.*\((.*)\)$", r"\1", name).rsplit(".", 1)[-1]
    return "" if name in WRAPPERS else name


def _root_cause(traceback: str) -> tuple[str, str] | None:
    """A remote traceback's first exception (Python prints a chain from its root) as
    (type, message with its further lines), or None when `traceback` is no traceback."""
    lines = traceback.splitlines()
    if not any(line.lstrip().startswith('File "') for line in lines):
        return None
    for k, line in enumerate(lines[1:], start=1):
        raised = RAISED.fullmatch(line)
        if raised and lines[k - 1].startswith(" ") and not line.startswith(" "):
            rest = []
            for more in lines[k + 1 :]:
                if not more.strip():
                    break
                rest.append(more)
            return raised["kind"], " ".join([raised["message"] or "", *rest])
    return None


def one_line(text: str) -> str:
    """What a failure's text says, as one readable line: Flower's error reply, its
    `<class '...'>` form of an exception, a reply's status and a remote traceback are
    each reduced to the cause (`Type: message`); shortened to `REASON_CHARS`."""
    text = ANSI.sub("", str(text)).strip()
    wrapped = FLOWER_ERROR.fullmatch(text)
    if wrapped:
        text = wrapped["reason"].strip()
    kind = ""
    if typed := TYPED.fullmatch(text):
        kind, text = typed["kind"], typed["message"]
    elif status := STATUS.fullmatch(text):
        code = status["code"].lower().replace("_", " ")
        detail = status["message"]
        text = f"its reply's status is {code}" + (f": {detail}" if detail else "")
    if cause := _root_cause(text):
        kind, text = cause
    message = " ".join(CLIENT_APP.sub("", text).split())
    kind = _kind(kind)
    line = f"{kind}: {message}" if kind and message else kind or message or "no detail"
    return line if len(line) <= REASON_CHARS else line[: REASON_CHARS - 3] + "..."


def failure_reason(failure: object, round_timeout_s: float) -> str:
    """Why a client failed, in one line: the cause of an exception (`Type: message`),
    a reply whose status is not OK, or a reply that never came."""
    if isinstance(failure, BaseException):
        text = str(failure)
        if FLOWER_ERROR.fullmatch(text.strip()) is None:
            text = f"{type(failure).__name__}: {text}" if text else type(failure).__name__
    else:  # (client, reply) whose status is not OK
        text = str(getattr(failure[1], "status", failure)) if isinstance(failure, tuple) else ""
    if "node unavailable" in text.lower():  # Flower's words for a node gone silent
        return "its node stopped sending heartbeats and left the federation"
    if "unavailable" in text.lower():  # Flower's words for a message that expired unanswered
        return (
            f"no reply within federation.round_timeout_s ({round_timeout_s:g} s)"
            " or its node left the federation"
        )
    return one_line(text)


def missing_reason(client_failures: Sequence[str]) -> str:
    """Why a region had no reply at all: what its clients' failures said, or that none did."""
    if not client_failures:
        return "no reply covered this region"
    unique = list(dict.fromkeys(client_failures))
    if len(unique) == 1:
        return f"client failed: {unique[0]}"
    return f"{len(client_failures)} clients failed: " + "; ".join(unique)


def split_update(
    weights: Sequence[np.ndarray], metrics: Mapping[str, Scalar], per_region: int
) -> list[RegionUpdate]:
    """Cut one client's reply (its regions' weight lists, concatenated, in one bundle) into
    region updates.

    ValueError when the reply cannot be cut: no bundle, wrong array count, no step count.
    """
    regions = wire.regions(metrics)
    weights = unbundle(weights)
    if len(weights) != per_region * len(regions):
        raise ValueError(
            f"{len(weights)} arrays for regions {regions}, expected {per_region} per region"
        )
    updates = []
    for k, region in enumerate(regions):
        values = wire.unpack(metrics, region)
        if "env_steps" not in values:
            raise ValueError(f"region {region}'s update does not say its env_steps")
        chunk = list(weights[k * per_region : (k + 1) * per_region])
        updates.append(RegionUpdate(region, chunk, int(values["env_steps"]), values))
    return updates


def _claimed_regions(metrics: Mapping[str, Scalar]) -> list[int]:
    try:
        return wire.regions(metrics)
    except ValueError:
        return []


def sort_out(
    expected: Sequence[int],
    replies: Sequence[tuple[Sequence[np.ndarray], Mapping[str, Scalar]]],
    client_failures: Sequence[str],
    reference: Sequence[np.ndarray],
    max_steps: int,
) -> RoundOutcome:
    """The healthy updates of a round and a reason for every other expected region.

    `expected` are the regions that take part in the round (a late region only from its
    join round); an update for any other region is not accounted for. `replies` are the
    clients' (weights, metrics); `client_failures` one reason per client that did not
    reply; `reference` the current global weights (shapes and dtypes an update must have);
    `max_steps` the environment steps one region can have trained this round.
    """
    failed: dict[int, str] = {}
    healthy: dict[int, RegionUpdate] = {}
    for weights, metrics in replies:
        try:
            updates = split_update(weights, metrics, len(reference))
        except ValueError as exc:
            for region in _claimed_regions(metrics):
                failed.setdefault(region, f"unreadable reply: {exc}")
            continue
        for update in updates:
            if update.region not in expected:
                continue  # not a region of this round: nothing to account for
            problem = check_update(update.weights, reference)
            if problem is None and not 0 < update.num_examples <= max_steps:
                problem = f"claims {update.num_examples} env steps, expected 1 to {max_steps}"
            if problem is None and update.region in healthy:
                problem = "two replies for this region"
                del healthy[update.region]
            if problem is not None:
                failed.setdefault(update.region, f"rejected update: {problem}")
            elif update.region not in failed:
                healthy[update.region] = update
    why = missing_reason(client_failures)
    for region in expected:
        if region not in healthy:
            failed.setdefault(region, why)
    failed = {r: why for r, why in failed.items() if r in expected}
    return RoundOutcome(
        [healthy[r] for r in sorted(healthy)], {r: failed[r] for r in sorted(failed)}
    )
