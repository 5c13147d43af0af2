"""OpenStack Placement: the policy's next decisions as allocation claims.

A decision (region, node) names a resource provider (`provider` template in the config).
For each ingress region's next job the hook asks Placement which providers could take the
job's resources (`GET /allocation_candidates`), and claims them on the chosen provider
(`PUT /allocations/{consumer}`) only if that provider is a candidate: the policy never
overbooks a node Placement says is full. Every request carries the token and the
configured microversion header (`OpenStack-API-Version: placement 1.39`).

Dry run prints the candidates query and the claim it would make; with a token it also
sends the (read-only) query and resolves the provider, so the plan says whether the claim
would fit. Live sends the claim.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from fedmc_flwr.errors import RunFailure
from fedmc_flwr.integrations.config import OpenStackHook
from fedmc_flwr.integrations.decisions import Decisions
from fedmc_flwr.integrations.mode import ActionLog
from fedmc_flwr.integrations.retry import with_retries


class PlacementError(RunFailure, RuntimeError):
    """Placement answered a request with an error that retrying cannot fix."""


class Placement:
    """A small Placement API client: provider lookup, candidates, claims."""

    def __init__(self, hook: OpenStackHook, token: str) -> None:
        self.hook = hook
        self.http = httpx.Client(
            base_url=hook.url.rstrip("/"),
            timeout=hook.timeout_s,
            headers={
                "X-Auth-Token": token,
                "OpenStack-API-Version": f"placement {hook.microversion}",
                "Accept": "application/json",
            },
        )

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        def call() -> httpx.Response:
            response = self.http.request(method, path, **kwargs)
            if response.status_code >= 500:
                response.raise_for_status()
            return response

        response = with_retries(
            call, f"placement {method} {path}", (httpx.HTTPError,), self.hook.attempts
        )
        if response.status_code >= 400:
            raise PlacementError(f"{method} {path}: {response.status_code} {response.text[:200]}")
        return response

    def provider(self, name: str) -> str | None:
        """The UUID of the provider called `name`, or None."""
        found = self._send("GET", "/resource_providers", params={"name": name}).json()
        providers = found["resource_providers"]
        return providers[0]["uuid"] if providers else None

    def candidates(self, query: dict[str, str]) -> set[str]:
        """UUIDs of the providers that could satisfy `query` on their own."""
        body = self._send("GET", "/allocation_candidates", params=query).json()
        return {rp for request in body["allocation_requests"] for rp in request["allocations"]}

    def claim(self, consumer: str, provider: str) -> None:
        self._send("PUT", f"/allocations/{consumer}", json=claim_body(self.hook, provider))


def candidates_query(hook: OpenStackHook) -> dict[str, str]:
    """The allocation-candidates query of one job's resources."""
    return {"resources": ",".join(f"{k}:{v}" for k, v in sorted(hook.resources.items()))}


def claim_body(hook: OpenStackHook, provider: str) -> dict[str, Any]:
    """The body of `PUT /allocations/{consumer}` at microversion 1.38 and later."""
    return {
        "allocations": {provider: {"resources": dict(hook.resources)}},
        "project_id": hook.project_id,
        "user_id": hook.user_id,
        "consumer_generation": None,
        "consumer_type": "INSTANCE",
    }


def claim_next_jobs(
    decisions: Decisions,
    hook: OpenStackHook,
    placement: Placement | None,
    live: bool,
    log: ActionLog,
) -> None:
    """One claim per ingress region's next job, on the node the policy chose."""
    query = candidates_query(hook)
    available = placement.candidates(query) if placement else None
    for ingress, action in zip(decisions.region_names, decisions.next_actions, strict=True):
        region, node = decisions.place(action)
        name = hook.provider.format(region=region, node=node)
        consumer = str(uuid.uuid4())
        record = {
            "ingress": ingress,
            "provider": name,
            "consumer": consumer,
            "query": f"GET /allocation_candidates?resources={query['resources']}",
            "claim": f"PUT /allocations/{consumer}",
        }
        if placement is None:
            log.emit("claim", **record, body=claim_body(hook, name), sent="nothing (no token)")
            continue
        uuid_ = placement.provider(name)
        fits = uuid_ is not None and uuid_ in (available or set())
        body = claim_body(hook, uuid_ or name)
        if not fits:
            log.emit("claim", **record, body=body, fits=False, sent="nothing (no capacity)")
        elif live:
            placement.claim(consumer, uuid_)
            log.emit("claim", **record, body=body, fits=True, sent="claim")
        else:
            log.emit("claim", **record, body=body, fits=True, sent="query only (dry run)")
