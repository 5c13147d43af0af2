"""How the server combines the regions' weights: plain numpy, testable without Flower.

`check_update` rejects malformed updates, `by_region` fixes the order of the survivors
(float sums depend on order; replies arrive in any order), `screen` turns away the
well-formed updates that must not count (impossible or absurd statistics, and
statistics far from what the other regions of the round report; for 'multi-krum' free
riders and the updates farthest from the others; for 'acceptance' the networks the
server's own worlds judge worse than the previous global one), and
`aggregate` builds the next global weights from the rest:

1. optionally clips each region's update (its change of the network weights this round)
   to `federation.clip` times the round's median update norm, so one region cannot drag
   the model by the size of its step;
2. combines the networks per `federation.aggregation`: the mean weighted by environment
   steps (FedAvg, also over the updates Multi-Krum or the acceptance check kept), or per
   coordinate the trimmed mean or the median of the regions (unweighted, as in Yin et al.
   2018), which a minority of broken or hostile regions cannot move arbitrarily far;
3. shrinks the result toward the previous global weights for strategy 'shrink';
4. pools the running observation and return moments: the global moments plus each
   region's moments of this round, between-region spread included (`policies/moments.py`),
   each region's sample count capped at what the round's (lower) median region reports
   per environment step (`capped_counts`), so one region's claim cannot outweigh the
   others, and, under the rules that claim a breakdown point, its means and standard
   deviations held within what the other regions report (`moments.bounded`), so one
   region cannot move the pooled moments by more than its share of the honest regions'
   own spread, and the round's pooled standard deviations held at
   `moments.POOLED_STD_RATIO` times the median region's (`moments.held`), so a
   minority's shares cannot add up past it.
   Under every rule, statistics far outside the others' are turned away (`screen`).

Sums run in float64 and every array keeps its own dtype (float32 network weights, float64
moments), so one round's result does not depend on how many virtual clients served the
regions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np
from flwr.common import Scalar
from scipy.stats import trim_mean

from fedmc_flwr import choices
from fedmc_flwr.choices import Breakdown
from fedmc_flwr.config import FederationConfig, breakdown_point
from fedmc_flwr.policies.moments import (
    MOMENT_ARRAYS,
    Moments,
    absurd,
    centre,
    held,
    outliers,
    pool,
)

Weights = list[np.ndarray]
Score = Callable[[Weights], float]
"""The server's judgement of a whole set of global weights (higher is better): the mean
reward on its own validation worlds (`federation.acceptance`)."""

FREE_RIDER_SHARE = 1e-3
"""Under 'multi-krum', an update whose norm is at most this share of the round's median
update norm is a free rider's: the global weights sent back (perhaps with a little noise)
as if trained. Multi-Krum alone would favour it: an update of 0 sits nearest to every
other (honest updates point in many directions), so it would be kept first."""


@dataclass
class RegionUpdate:
    """One region's trained weights, as reported after a round of local PPO."""

    region: int
    """Region index (the partition id when every virtual client serves one region)."""
    weights: Weights
    num_examples: int
    """Environment steps behind the update: its weight in the mean."""
    metrics: dict[str, Scalar] = field(default_factory=dict)


def check_update(weights: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> str | None:
    """Why `weights` cannot be averaged with arrays shaped like `reference`, or None if it can."""
    if len(weights) != len(reference):
        return f"{len(weights)} arrays, expected {len(reference)}"
    for k, (array, ref) in enumerate(zip(weights, reference, strict=True)):
        array = np.asarray(array)
        if array.shape != ref.shape:
            return f"array {k} has shape {array.shape}, expected {ref.shape}"
        if array.dtype != ref.dtype:
            return f"array {k} has dtype {array.dtype}, expected {ref.dtype}"
        if not np.all(np.isfinite(array)):
            return f"array {k} holds NaN or inf"
    return None


def by_region(updates: Sequence[RegionUpdate]) -> list[RegionUpdate]:
    """Updates in region order; two updates for one region are an error, not a choice."""
    ordered = sorted(updates, key=lambda u: u.region)
    for first, second in pairwise(ordered):
        if first.region == second.region:
            raise ValueError(f"two updates for region {first.region}")
    return ordered


def weighted_mean(updates: Sequence[Sequence[np.ndarray]], weights: Sequence[float]) -> Weights:
    """Mean of several weight lists, weighted by `weights`, summed in the order given."""
    if not updates:
        raise ValueError("nothing to average")
    if len(updates) != len(weights):
        raise ValueError(f"{len(updates)} updates but {len(weights)} weights")
    w = np.asarray(weights, dtype=np.float64)
    if np.any(w < 0) or not np.isfinite(w).all() or w.sum() <= 0:
        raise ValueError(f"weights must be finite, >= 0 and not all zero, got {list(weights)}")
    w = w / w.sum()
    out = []
    for k, ref in enumerate(updates[0]):
        total = np.zeros(np.shape(ref), dtype=np.float64)
        for share, update in zip(w, updates, strict=True):
            total += share * np.asarray(update[k], dtype=np.float64)
        out.append(total.astype(np.asarray(ref).dtype))
    return out


def coordinatewise(
    updates: Sequence[Sequence[np.ndarray]], reduce: Callable[[np.ndarray], np.ndarray]
) -> Weights:
    """Per coordinate over the regions: `reduce` of the regions' values stacked on axis 0
    (a median, a trimmed mean), in float64, each array back in its own dtype."""
    if not updates:
        raise ValueError("nothing to combine")
    out = []
    for k, ref in enumerate(updates[0]):
        stacked = np.stack([np.asarray(u[k], dtype=np.float64) for u in updates])
        out.append(np.asarray(reduce(stacked)).astype(np.asarray(ref).dtype))
    return out


def deltas(
    networks: Sequence[Sequence[np.ndarray]], previous: Sequence[np.ndarray]
) -> list[Weights]:
    """Each network's update: its change from `previous`, array by array, in float64."""
    base = [np.asarray(p, dtype=np.float64) for p in previous]
    return [[np.asarray(a, np.float64) - b for a, b in zip(n, base, strict=True)] for n in networks]


def norms(updates: Sequence[Sequence[np.ndarray]]) -> np.ndarray:
    """The L2 norm of each update over all its arrays."""
    return np.array([np.sqrt(sum(float(np.sum(d * d)) for d in u)) for u in updates])


def clip_to_median(
    networks: Sequence[Sequence[np.ndarray]], previous: Sequence[np.ndarray], factor: float
) -> list[Weights]:
    """Each network moved back toward `previous` so that its update's L2 norm (over all
    arrays) is at most `factor` times the median of the updates' norms."""
    moves = deltas(networks, previous)
    sizes = norms(moves)
    limit = factor * float(np.median(sizes))
    base = [np.asarray(p, dtype=np.float64) for p in previous]
    out = []
    for delta, norm, network in zip(moves, sizes, networks, strict=True):
        scale = 1.0 if norm <= limit else limit / norm
        out.append(
            [(b + scale * d).astype(a.dtype) for a, b, d in zip(network, base, delta, strict=True)]
        )
    return out


def free_riders(sizes: np.ndarray) -> list[int]:
    """Indices of the updates whose norm is at most FREE_RIDER_SHARE of the median norm
    (none when the median itself is 0: then nobody moved and nobody can be told apart)."""
    median = float(np.median(sizes))
    return [k for k, size in enumerate(sizes) if median > 0 and size <= FREE_RIDER_SHARE * median]


def krum_scores(flat: np.ndarray, byzantine: int) -> np.ndarray:
    """Krum's score of each row of `flat` (one flattened update per region; Blanchard et
    al. 2017): the sum of its squared distances to its `n - byzantine - 2` nearest other
    rows (at least 1). A hostile update far from the honest ones scores high as long as
    the honest updates are the majority that stand close together."""
    n = len(flat)
    if n < 2:
        return np.zeros(n)
    squared = np.sum(flat * flat, axis=1)
    distances = np.maximum(squared[:, None] + squared[None, :] - 2.0 * flat @ flat.T, 0.0)
    np.fill_diagonal(distances, np.inf)
    nearest = min(max(1, n - byzantine - 2), n - 1)
    return np.sort(distances, axis=1)[:, :nearest].sum(axis=1)


def multi_krum(flat: np.ndarray, byzantine: int) -> tuple[list[int], np.ndarray]:
    """Multi-Krum's choice: the `n - byzantine` rows (at least 1) with the lowest Krum
    scores, in row order, and every row's score. Ties go to the lower row index."""
    scores = krum_scores(flat, byzantine)
    keep = max(1, len(flat) - byzantine)
    chosen = np.argsort(scores, kind="stable")[:keep]
    return sorted(int(k) for k in chosen), scores


def check_statistics(arrays: Sequence[np.ndarray]) -> str | None:
    """Why running moments (`[count, mean, var]` groups) cannot be pooled, or None."""
    for k in range(0, len(arrays), MOMENT_ARRAYS):
        count, _, var = arrays[k : k + MOMENT_ARRAYS]
        if np.any(np.asarray(count) < 0):
            return f"statistics group {k // MOMENT_ARRAYS} has a negative count"
        if np.any(np.asarray(var) < 0):
            return f"statistics group {k // MOMENT_ARRAYS} has a negative variance"
    return None


def moment_groups(
    previous: Sequence[np.ndarray], fresh: Sequence[Sequence[np.ndarray]]
) -> Iterator[tuple[int, Moments, list[Moments]]]:
    """Each group of running moments (`[count, mean, var]` arrays): its index, the global
    moments in `previous` and each region's in `fresh`."""
    for k in range(0, len(previous), MOMENT_ARRAYS):
        parts = [Moments.from_arrays(f[k : k + MOMENT_ARRAYS]) for f in fresh]
        yield k // MOMENT_ARRAYS, Moments.from_arrays(previous[k : k + MOMENT_ARRAYS]), parts


StatisticsJudge = Callable[[list[Moments], Moments], dict[int, str]]
"""(the regions' moments of one group, the global ones) -> index -> why it is turned away."""


def _outliers(parts: list[Moments], _: Moments) -> dict[int, str]:
    """`moments.outliers`: judged against the other regions of the round only."""
    return outliers(parts)


STATISTICS_JUDGES: tuple[StatisticsJudge, ...] = (absurd, _outliers)
"""In order: finite moments too large to pool without overflow (`moments.absurd`), then,
among the rest, moments far from what the other regions of the round report
(`moments.outliers`)."""


def suspect_statistics(
    updates: Sequence[RegionUpdate], previous: Sequence[np.ndarray], cut: int
) -> dict[int, str]:
    """Region -> why its running moments (from array `cut` on) are turned away, group by
    group, by each of STATISTICS_JUDGES in turn (a region one judge turned away is not
    among those the next one compares)."""
    out: dict[int, str] = {}
    for judge in STATISTICS_JUDGES:
        left = [u for u in updates if u.region not in out]
        for group, reference, parts in moment_groups(
            previous[cut:], [u.weights[cut:] for u in left]
        ):
            for index, why in judge(parts, reference).items():
                out.setdefault(left[index].region, f"statistics group {group}: {why}")
    return out


def scoring_statistics(
    previous: Sequence[np.ndarray],
    fresh: Sequence[Sequence[np.ndarray]],
    steps: Sequence[int],
) -> Weights:
    """The running moments 'acceptance' judges candidates under: the global ones plus,
    per group, the regions' `moments.centre` (per feature the median of their means and
    of their variances about it, at their capped counts), which one region of three or
    more cannot move outside what the others report. Candidates and the previous network
    are judged under the same moments, so none gains by what its own region claims."""
    out: Weights = []
    for _, reference, parts in moment_groups(previous, fresh):
        counts = capped_counts(np.array([p.count for p in parts]), np.asarray(steps))
        capped = [Moments(c, p.mean, p.var) for c, p in zip(counts, parts, strict=True)]
        out += pool([reference, centre(capped)]).arrays()
    return out


GAIN_KEPT = 0.75
"""Under 'acceptance', the share of the median candidate's gain over the previous network
that a candidate must keep (`accepted`). Regions' networks scatter most in round 1, when
each steps from the random start: in a clean 10-region federation one honest network
scored 0.31 below the median of -1.00, a tenth of the round's gain of 3.1
(`tests/test_acceptance.py::MEASURED`), so a bar of 10% of the median's size turned it
away; a quarter of the gain leaves 2.5 times that scatter. The hostile networks of the
attack table kept none of the gain: sign-flip, colluding and noise scored -4.2 to -4.7
in round 1, at or below the random start's -4.2 (`tests/test_acceptance.py::ROUND_ONE`)."""


def accepted(
    updates: Sequence[RegionUpdate],
    previous: Sequence[np.ndarray],
    cut: int,
    tolerance: float,
    score: Score,
) -> tuple[list[RegionUpdate], dict[int, str]]:
    """The 'acceptance' rule's choice: each region's network scored by the server on its
    own worlds, beside the previous global network, all under the same
    `scoring_statistics` (arrays from `cut` on are statistics). The bar is the better of
    the previous network's score and the candidates' lower median score, less a margin:
    the larger of `tolerance` (`federation.acceptance_tolerance`) of the median's size and
    the share of the median's gain over the previous network that a candidate may lose
    (1 - GAIN_KEPT). A hostile minority can neither lift the median above the honest
    candidates nor lower the bar below the previous network less the tolerance, and an
    honest region is turned away only if its round did markedly worse than the median
    one, by the scatter of a late round or the larger scatter of a round that moved far
    (round 1, from the random start). Each network is judged on its own merit, so copies
    of a hostile update do not vouch for each other. When every candidate falls below the
    bar (the previous network better than all), those within `tolerance` of the best
    candidate are kept: the rule never turns every region away at once."""
    statistics = scoring_statistics(
        previous[cut:], [u.weights[cut:] for u in updates], [u.num_examples for u in updates]
    )
    reference = score([*previous[:cut], *statistics])
    scores = [score([*update.weights[:cut], *statistics]) for update in updates]
    middle = sorted(scores)[(len(scores) - 1) // 2]
    margin = max(tolerance * abs(middle), (1.0 - GAIN_KEPT) * (middle - reference))
    floor = max(reference, middle) - margin
    why = (
        f"the better of the previous global network's {reference:.4g} and the candidates' "
        f"lower median {middle:.4g}, less the larger of federation.acceptance_tolerance "
        f"{tolerance:g} of the median and {1.0 - GAIN_KEPT:g} of its gain"
    )
    if max(scores) < floor:
        best = max(scores)
        floor = best - tolerance * abs(best)
        why = (
            f"every candidate fell below the previous global network's {reference:.4g}: "
            f"the best candidate's {best:.4g}, less federation.acceptance_tolerance "
            f"{tolerance:g} of it"
        )
    kept, rejected = [], {}
    for update, mine in zip(updates, scores, strict=True):
        if mine >= floor:
            kept.append(update)
        else:
            rejected[update.region] = (
                f"server check: reward {mine:.4g} on the server's worlds, below {floor:.4g} ({why})"
            )
    return kept, rejected


@dataclass(frozen=True)
class Screening:
    """What a rule's selection reads besides the updates it judges."""

    previous: Sequence[np.ndarray]
    """The previous global weights, statistics included."""
    cut: int
    """Arrays before `cut` are the network; from `cut` on, running moments."""
    federation: FederationConfig
    found: int
    """Hostile regions already turned away this round (suspect statistics, free riders):
    each counts as one of `federation.byzantine`."""
    regions: int
    """Regions that replied this round: what `federation.byzantine: auto` is read for."""
    score: Score | None
    """The server's judgement of a set of global weights, for rules that need it."""


Selection = tuple[list[RegionUpdate], dict[int, str]]
"""The updates kept, in region order, and region -> why each other was turned away."""


def hostile_assumed(federation: FederationConfig, regions: int) -> int:
    """`federation.byzantine` as a count: 'auto' is the most hostile regions the rule's
    breakdown point allows among the `regions` that replied this round
    (`config.breakdown_point`), so an operator who does not know how many attackers there
    are gets the most protection the rule offers for the round's federation."""
    if federation.byzantine != "auto":
        return int(federation.byzantine)
    return breakdown_point(
        federation.aggregation, regions, federation.trim_fraction, federation.min_regions
    )


def krum_selection(kept: list[RegionUpdate], screening: Screening) -> Selection:
    """'multi-krum': the updates nearest to the others (`multi_krum`, on the networks'
    updates only), for the hostile regions not yet found."""
    moves = deltas([u.weights[: screening.cut] for u in kept], screening.previous[: screening.cut])
    flat = np.stack([np.concatenate([d.ravel() for d in move]) for move in moves])
    byzantine = hostile_assumed(screening.federation, screening.regions)
    auto = f" = {byzantine}" if screening.federation.byzantine == "auto" else ""
    chosen, scores = multi_krum(flat, max(0, byzantine - screening.found))
    worst_kept = float(max(scores[chosen]))
    rejected = {
        update.region: (
            f"multi-krum: score {scores[k]:.3g} above the {len(chosen)} kept of "
            f"{len(kept)} (highest kept {worst_kept:.3g}, federation.byzantine "
            f"{screening.federation.byzantine}{auto}, hostile already found {screening.found})"
        )
        for k, update in enumerate(kept)
        if k not in chosen
    }
    return [kept[k] for k in chosen], rejected


def acceptance_selection(kept: list[RegionUpdate], screening: Screening) -> Selection:
    """'acceptance': the networks the server's own worlds do not judge worse than the
    previous global one (`accepted`)."""
    if screening.score is None:
        raise ValueError("aggregation 'acceptance' needs the server's score")
    tolerance = screening.federation.acceptance_tolerance
    return accepted(kept, screening.previous, screening.cut, tolerance, screening.score)


def steps_weighted(
    networks: Sequence[Weights], steps: Sequence[int], _: FederationConfig
) -> Weights:
    """The mean weighted by environment steps (FedAvg)."""
    return weighted_mean(networks, steps)


def coordinate_median(
    networks: Sequence[Weights], _: Sequence[int], __: FederationConfig
) -> Weights:
    """Per coordinate, the regions' median (unweighted, as in Yin et al. 2018)."""
    return coordinatewise(networks, lambda stacked: np.median(stacked, axis=0))


def coordinate_trimmed_mean(
    networks: Sequence[Weights], _: Sequence[int], federation: FederationConfig
) -> Weights:
    """Per coordinate, the mean of the regions left once `federation.trim_fraction` of
    them is cut at each end (unweighted)."""
    trim = federation.trim_fraction
    return coordinatewise(networks, lambda stacked: trim_mean(stacked, trim, axis=0))


@dataclass(frozen=True)
class Rule:
    """One aggregation rule: how the networks that count are combined, and, for a rule
    that turns updates away before combining, which count (each one turned away is a
    `failed` row naming why)."""

    combine: Callable[[Sequence[Weights], Sequence[int], FederationConfig], Weights]
    select: Callable[[list[RegionUpdate], Screening], Selection] | None = None
    """Free riders are turned away first for every rule that selects."""
    needs_score: bool = False
    """The rule judges candidates on the server's own worlds (`federation/acceptance.py`)."""
    breakdown: Breakdown | None = None
    """Its breakdown point (docs/security.md): the most hostile regions it holds against,
    which the config enforces on `federation.byzantine` before any work starts and 'auto'
    reads (`config.breakdown_point`); None: it makes no claim and does not read
    `federation.byzantine`. Under a rule that claims one, each region's running moments
    are also held within the others' (`pool_statistics`)."""


AGGREGATIONS: dict[str, Rule] = {
    "mean": Rule(steps_weighted),
    "trimmed-mean": Rule(
        coordinate_trimmed_mean,
        breakdown=lambda regions, trim_fraction, _: int(trim_fraction * regions),
    ),
    "median": Rule(coordinate_median, breakdown=lambda regions, _, __: (regions - 1) // 4),
    "multi-krum": Rule(
        steps_weighted, krum_selection, breakdown=lambda regions, _, __: max(0, (regions - 3) // 2)
    ),
    "acceptance": Rule(
        steps_weighted,
        acceptance_selection,
        needs_score=True,
        breakdown=lambda regions, _, min_regions: regions - min_regions,
    ),
}
"""Every aggregation rule by the name `federation.aggregation` gives it, the one list of
them (the config allows these names: `choices.AGGREGATIONS`). 'mean': weighted by
environment steps, no breakdown point. 'trimmed-mean': per coordinate, the
`trim_fraction` largest and smallest values of the regions dropped first; it holds as many
as it trims at each end. 'median': per coordinate; it holds f with regions >= 4 f + 1 (its
classical bound, fewer than half, bounds the damage but did not keep the policy within 5%
of clean). 'multi-krum': free riders and the `byzantine` updates farthest from the others
turned away as `failed` rows, the mean of the rest; it holds Krum's condition regions >=
2 f + 3 (identical copies beyond it are each other's nearest neighbours and are kept).
'acceptance': the server scores each region's network on its own validation worlds and
averages those that do not fall behind the previous global network; it holds all but
`min_regions`, since each update is judged on the server's worlds, not by its neighbours
(docs/security.md)."""
choices.AGGREGATIONS.implemented_by(AGGREGATIONS, lambda rule: rule.breakdown)


def screen(
    updates: Sequence[RegionUpdate],
    previous: Sequence[np.ndarray],
    federation: FederationConfig,
    statistics: int,
    score: Score | None = None,
) -> Selection:
    """The updates that may count this round, in region order, and why each other was
    turned away.

    Statistics with a negative count or variance are always turned away, and so are
    suspect ones (`suspect_statistics`: a scale far beyond the round's, or, with three
    regions or more, moments far from the other regions'). For a
    rule that selects (`Rule.select`), free riders go next (`free_riders`), then the
    rule's own selection; each region turned away before it counts as one of the
    `federation.byzantine` hostile regions. A turned-away region's moments are not
    pooled either.
    """
    cut = len(previous) - statistics * MOMENT_ARRAYS
    kept: list[RegionUpdate] = []
    rejected: dict[int, str] = {}
    for update in by_region(updates):
        problem = check_statistics(update.weights[cut:])
        if problem is None:
            kept.append(update)
        else:
            rejected[update.region] = f"rejected update: {problem}"
    suspects: dict[int, str] = {}
    if kept:
        suspects = suspect_statistics(kept, previous, cut)
        rejected |= {region: f"rejected update: {why}" for region, why in suspects.items()}
        kept = [u for u in kept if u.region not in suspects]
    select = AGGREGATIONS[federation.aggregation].select
    if select is None or not kept:
        return kept, dict(sorted(rejected.items()))
    sizes = norms(deltas([u.weights[:cut] for u in kept], previous[:cut]))
    riders = free_riders(sizes)
    median = float(np.median(sizes))
    for k in riders:
        rejected[kept[k].region] = (
            f"free rider: update norm {sizes[k]:.3g}, at most {FREE_RIDER_SHARE:g} x the "
            f"round's median {median:.3g} (the global weights sent back)"
        )
    kept = [u for k, u in enumerate(kept) if k not in riders]
    if kept:
        found = len(riders) + len(suspects)
        screening = Screening(previous, cut, federation, found, len(updates), score)
        kept, judged = select(kept, screening)
        rejected |= judged
    return kept, dict(sorted(rejected.items()))


def shrink(average: Sequence[np.ndarray], previous: Sequence[np.ndarray], mu: float) -> Weights:
    """`(1 - mu) * average + mu * previous`, array by array: the server shrink (a damped
    FedAvg), and a mixing region's start, its own network moved `mu` of the way to the
    global one (`client_app.adopt_global`)."""
    if not 0.0 <= mu < 1.0:
        raise ValueError(f"mu must lie in [0, 1), got {mu}")
    return [
        ((1.0 - mu) * np.asarray(a, np.float64) + mu * np.asarray(p, np.float64)).astype(a.dtype)
        for a, p in zip(average, previous, strict=True)
    ]


def capped_counts(counts: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Each region's sample count capped at its environment steps times the round's lower
    median count per step. Honest regions of one federation see about as many samples per
    step (one per step for returns, one per node for observations), so they keep their
    counts and pool exactly; a region that claims a huge count weighs as much as a median
    one. The lower median (of an even number, the lower middle value) because the plain
    median of two regions is their mean, which one huge claim lifts as far as it likes."""
    counts, steps = np.asarray(counts, np.float64), np.asarray(steps, np.float64)
    per_step = np.sort(counts / steps)
    return np.minimum(counts, steps * float(per_step[(len(per_step) - 1) // 2]))


def pool_statistics(
    previous: Sequence[np.ndarray],
    fresh: Sequence[Sequence[np.ndarray]],
    steps: Sequence[int],
    bound: bool = True,
) -> Weights:
    """Running moments (`[count, mean, var]` groups) pooled: the global ones plus what each
    region saw this round in `steps` environment steps, with the between-region spread
    (never a plain average), each count capped (`capped_counts`) and, with `bound` and
    three regions or more, each region's means and standard deviations held within what
    the other regions of the round report and the round's pooled standard deviations
    within `moments.POOLED_STD_RATIO` times the median region's (`moments.held`). The
    global moments are only ever added to, by rounds each bounded so, so an attacker who
    shifts further every round cannot ratchet them. `aggregate` bounds under the rules that
    claim a breakdown point: an honest region whose workload differs much from the others' (the busy
    region of a three-region federation, its returns' spread 3.5 times the others') lies
    outside the band, so under 'mean', which claims none, every region pools exactly."""
    out: Weights = []
    for _, reference, parts in moment_groups(previous, fresh):
        counts = capped_counts(np.array([p.count for p in parts]), np.asarray(steps))
        capped = [Moments(c, p.mean, p.var) for c, p in zip(counts, parts, strict=True)]
        out += pool([reference, *(held(capped) if bound else capped)]).arrays()
    return out


def aggregate(
    updates: Sequence[RegionUpdate],
    previous: Sequence[np.ndarray],
    federation: FederationConfig,
    statistics: int,
) -> Weights:
    """The next global weights from healthy updates (see the module docstring): for a
    rule that selects, from those `screen` kept.

    The last `statistics` groups of `MOMENT_ARRAYS` arrays are running moments, pooled;
    the arrays before them are the network, combined (and shrunk for 'shrink').
    """
    ordered = by_region(updates)
    cut = len(previous) - statistics * MOMENT_ARRAYS
    if cut < 0:
        raise ValueError(f"{len(previous)} arrays cannot hold {statistics} statistics")
    networks: Sequence[Sequence[np.ndarray]] = [u.weights[:cut] for u in ordered]
    if federation.clip > 0:
        networks = clip_to_median(networks, previous[:cut], federation.clip)
    steps = [u.num_examples for u in ordered]
    combined = AGGREGATIONS[federation.aggregation].combine(networks, steps, federation)
    if federation.strategy == "shrink":
        combined = shrink(combined, previous[:cut], federation.mu)
    robust = AGGREGATIONS[federation.aggregation].breakdown is not None
    fresh = [u.weights[cut:] for u in ordered]
    return combined + pool_statistics(previous[cut:], fresh, steps, bound=robust)
