"""The two-tier network's acting arithmetic, compiled with numba (no torch).

`policies/acting.py` wraps it for a torch network: why it exists and what it must equal
is written there. It is a module of its own so that a process that only prepares a run
(`fedmc run`, before Flower starts the clients) can compile it into the shared cache
without importing torch (`warm_cache`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from fedmc_flwr.policies.normalisers import OBS_CLIP
from fedmc_flwr.sim import compile_cache
from fedmc_flwr.sim.layout import EXPECTED_DELAY, GLOBAL_WIDTH, NODE_WIDTH

compile_cache.install()  # before the first @njit: numba picks the cache locator then

MASKED_LOGIT = -1e8
"""Logit of a masked action: its probability is exactly 0 and its entropy term 0, never NaN."""
ROW_WIDTH = NODE_WIDTH + GLOBAL_WIDTH
"""A node's row as a per-node network reads it: its features, then the global ones."""
SUMMARY_WIDTH = NODE_WIDTH + 2 + GLOBAL_WIDTH
"""A region's summary row: its nodes' mean features, least valid expected delay, valid
share, then the global features."""
_LAYER_MATHS = {"contract", "nsz", "arcp"}
"""Fast-math flags of the layers: each output is one chain of fused multiply-adds, bias
first, then the inputs in order ('contract'); no 'reassoc', which would let LLVM regroup
the chain `_layer` writes out and change the numbers. No 'nnan' or 'ninf': masked scores
and the noise's logarithm may be infinite."""


@njit(cache=True, inline="always")
def _standardise(value: float, shift: float, scale: float) -> np.float32:
    return np.float32(min(max((value - shift) * scale, -OBS_CLIP), OBS_CLIP))


@njit(cache=True, fastmath=_LAYER_MATHS)
def scores(x, params, layers):
    """A scorer on every column of `x` (`[in, M]`, feature-major): ReLU layers, then a
    linear score, `[M]`. `layers` rows are `(weights' offset, in, out, bias offset)` into
    `params`, weights `[in, out]`. Feature-major, the innermost loop runs over the M rows
    of the batch, long and contiguous, which the compiler vectorises; a row at a time it
    would run over 32 outputs only."""
    inp = x
    for layer in range(len(layers)):
        start, fan_in, fan_out, bias = layers[layer]
        out = np.empty((fan_out, x.shape[1]), dtype=np.float32)
        _layer(inp, params, start, fan_in, fan_out, bias, layer < len(layers) - 1, out)
        inp = out
    return inp[0]


@njit(cache=True, fastmath=_LAYER_MATHS, _nrt=False)
def _layer(inp, params, start, fan_in, fan_out, bias, relu, out):
    """One layer of `scores` into `out`. This and the other loops below are compiled
    without numba's reference counting: they allocate nothing, and with it each row they
    take of an array paid an atomic increment and decrement (for the row loops of
    `decide`, about half its time at 64 worlds).

    Each output row takes its inputs eight (then four, then one) at a time: one load and
    one store of the row per eight multiply-adds rather than per one, the bound of the
    loop. Every number is still the bias, then input 0's product, then input 1's, in
    order, each a fused multiply-add: the same numbers as one input at a time."""
    for j in range(fan_out):
        row = out[j]
        row[:] = params[bias + j]
        k = 0
        while k + 8 <= fan_in:
            _add8(row, params, start + k * fan_out + j, fan_out, inp, k)
            k += 8
        while k + 4 <= fan_in:
            _add4(row, params, start + k * fan_out + j, fan_out, inp, k)
            k += 4
        while k < fan_in:
            weight, src = params[start + k * fan_out + j], inp[k]
            for i in range(len(row)):
                row[i] += weight * src[i]
            k += 1
        if relu:
            for i in range(len(row)):
                row[i] = max(row[i], np.float32(0.0))


@njit(cache=True, fastmath=_LAYER_MATHS, _nrt=False, inline="always")
def _add4(row, params, at, stride, inp, k):
    """`row += each of inputs k to k + 3 times its weight`, chained in order."""
    weights, sources = _four(params, at, stride, inp, k)
    for i in range(len(row)):
        row[i] = _chain(row[i], weights, sources, i)


@njit(cache=True, fastmath=_LAYER_MATHS, _nrt=False, inline="always")
def _add8(row, params, at, stride, inp, k):
    """`_add4` of inputs k to k + 7 in one pass over the row."""
    weights, sources = _four(params, at, stride, inp, k)
    more_weights, more_sources = _four(params, at + 4 * stride, stride, inp, k + 4)
    for i in range(len(row)):
        row[i] = _chain(_chain(row[i], weights, sources, i), more_weights, more_sources, i)


@njit(cache=True, inline="always")
def _four(params, at, stride, inp, k):
    """Inputs k to k + 3 and their weights into one output (`_layer`'s weight layout)."""
    weights = (params[at], params[at + stride], params[at + 2 * stride], params[at + 3 * stride])
    return weights, (inp[k], inp[k + 1], inp[k + 2], inp[k + 3])


@njit(cache=True, fastmath=_LAYER_MATHS, inline="always")
def _chain(value, weights, sources, i):
    """`value` plus four products, added one after another."""
    value = value + weights[0] * sources[0][i] + weights[1] * sources[1][i]
    return value + weights[2] * sources[2][i] + weights[3] * sources[3][i]


@njit(cache=True, _nrt=False)
def _sample(logits, allowed, noise, greedy, logp):
    """Masked log-softmax of one env's `logits` into `logp`, then the Gumbel-max sample
    (the torch path's draw: `logp - log(-log(noise))`), or the argmax when greedy."""
    top = -np.inf
    for i in range(len(logits)):
        logp[i] = logits[i] if allowed[i] else np.float32(MASKED_LOGIT)
        top = max(top, logp[i])
    total = 0.0
    for i in range(len(logits)):
        total += np.exp(np.float64(logp[i] - top))
    log_total = np.float32(np.log(total))
    best, best_key = 0, -np.inf
    for i in range(len(logits)):
        logp[i] = logp[i] - top - log_total
        key = logp[i] if greedy else logp[i] - np.log(-np.log(noise[i]))
        if key > best_key:
            best, best_key = i, key
    return best


@njit(cache=True)
def _summaries(obs, mask, shift, scale, nodes_per_region, x, summaries, valid):
    """`_summarise` into a new array: the summaries feature-major, `[SUMMARY_WIDTH, B * R]`."""
    batch, num_nodes = mask.shape
    columns = np.empty((SUMMARY_WIDTH, batch * (num_nodes // nodes_per_region)), np.float32)
    _summarise(obs, mask, shift, scale, nodes_per_region, x, summaries, valid, columns)
    return columns


@njit(cache=True, _nrt=False)
def _summarise(obs, mask, shift, scale, nodes_per_region, x, summaries, valid, columns):
    """Normalise every node row into `x` (`[B, nodes, NODE_WIDTH]`) and write each
    region's summary and valid flag (`TwoTier.summaries`: mean features, least valid
    expected delay, valid share, globals) into `summaries` (`[B, R, SUMMARY_WIDTH]`), and
    feature-major into `columns` (`[SUMMARY_WIDTH, B * R]`), as `scores` reads them."""
    batch, num_nodes = mask.shape
    regions = num_nodes // nodes_per_region
    flat = num_nodes * NODE_WIDTH
    for b in range(batch):
        for i in range(num_nodes):
            for f in range(NODE_WIDTH):
                x[b, i, f] = _standardise(obs[b, i * NODE_WIDTH + f], shift[f], scale[f])
        for r in range(regions):
            row = summaries[b, r]
            row[:NODE_WIDTH] = 0.0
            least = np.float32(np.inf)
            live = 0
            for n in range(nodes_per_region):
                i = r * nodes_per_region + n
                for f in range(NODE_WIDTH):
                    row[f] += x[b, i, f]
                if mask[b, i]:
                    live += 1
                    least = min(least, x[b, i, EXPECTED_DELAY])
            for f in range(NODE_WIDTH):
                row[f] /= np.float32(nodes_per_region)
            valid[b, r] = live > 0
            row[NODE_WIDTH] = least if live > 0 else np.float32(0.0)
            row[NODE_WIDTH + 1] = np.float32(live) / np.float32(nodes_per_region)
            for g in range(GLOBAL_WIDTH):
                f = NODE_WIDTH + g
                row[NODE_WIDTH + 2 + g] = _standardise(obs[b, flat + g], shift[f], scale[f])
            for f in range(SUMMARY_WIDTH):
                columns[f, b * regions + r] = row[f]


@njit(cache=True)
def _critic(summaries, privileged, params, layers):
    """`[B]` values: the critic on the regions' mean summary and the `[B, P]` privileged
    inputs beside it (`TwoTier._value`; P may be 0)."""
    pooled = np.zeros((SUMMARY_WIDTH + privileged.shape[1], summaries.shape[0]), np.float32)
    _pool(summaries, privileged, pooled)
    return scores(pooled, params, layers)


@njit(cache=True, _nrt=False)
def _pool(summaries, privileged, pooled):
    """The critic's input columns: each env's mean region summary, then its privileged row."""
    batch, regions = summaries.shape[:2]
    for b in range(batch):
        for f in range(SUMMARY_WIDTH):
            for r in range(regions):
                pooled[f, b] += summaries[b, r, f]
            pooled[f, b] /= np.float32(regions)
        for f in range(privileged.shape[1]):
            pooled[SUMMARY_WIDTH + f, b] = privileged[b, f]


@njit(cache=True)
def decide(
    obs,
    mask,
    shift,
    scale,
    nodes_per_region,
    params,
    region_layers,
    node_layers,
    critic_layers,
    noise,
    greedy,
    forced,
    privileged,
    action,
    logprob,
    value,
    summaries,
    valid,
    rows,
    node_mask,
):
    """Every env's decision, tier by tier over the whole batch (see the module
    docstring); writes the output arrays. `forced`: take the actions `action` holds (a
    teacher's) rather than drawing, and score those."""
    batch, num_nodes = mask.shape
    n = nodes_per_region
    regions = num_nodes // n
    x = np.empty((batch, num_nodes, NODE_WIDTH), dtype=np.float32)
    columns = _summaries(obs, mask, shift, scale, n, x, summaries, valid)
    # the forced action's tiers; `_choose` overwrites them when not forced
    region, node = action // n, action % n
    logprob[:] = 0.0  # each tier adds its choice's log-probability
    region_scores = scores(columns, params, region_layers).reshape(batch, regions)
    logp = np.empty((batch, regions), dtype=np.float32)
    _choose(region_scores, valid, noise[:, :regions], greedy, forced, logp, region, logprob)
    node_columns = np.empty((ROW_WIDTH, batch * n), dtype=np.float32)
    _gather(x, summaries, mask, region, rows, node_mask, node_columns)
    node_scores = scores(node_columns, params, node_layers).reshape(batch, n)
    logp = np.empty((batch, n), dtype=np.float32)
    _choose(node_scores, node_mask, noise[:, regions:], greedy, forced, logp, node, logprob)
    for b in range(batch):
        action[b] = region[b] * n + node[b]
    value[:] = _critic(summaries, privileged, params, critic_layers)


@njit(cache=True, _nrt=False)
def _choose(options, allowed, noise, greedy, forced, logp, choice, logprob):
    """One tier for every env, regions or a region's nodes alike: the masked log-softmax of
    its `options`' scores into `logp` and the option drawn with its `noise` (the greedy one
    when `greedy`) into `choice`, unless `forced`, when `choice` holds the option already;
    that option's log-probability added to `logprob`."""
    for b in range(len(choice)):
        drawn = _sample(options[b], allowed[b], noise[b], greedy, logp[b])
        if not forced:
            choice[b] = drawn
        logprob[b] += logp[b, choice[b]]


@njit(cache=True, _nrt=False)
def _gather(x, summaries, mask, region, rows, node_mask, node_columns):
    """Tier 2's inputs: each env's chosen `region`'s node rows (its nodes' normalised
    features, then the global ones) into `rows` and, feature-major, `node_columns`, and
    their mask into `node_mask`."""
    batch, n = node_mask.shape
    for b in range(batch):
        first = region[b] * n
        for j in range(n):
            row = rows[b, j]
            for f in range(NODE_WIDTH):
                row[f] = x[b, first + j, f]
            for g in range(GLOBAL_WIDTH):
                row[NODE_WIDTH + g] = summaries[b, region[b], NODE_WIDTH + 2 + g]
            node_mask[b, j] = mask[b, first + j]
            for f in range(ROW_WIDTH):
                node_columns[f, b * n + j] = row[f]


@njit(cache=True)
def values(obs, mask, shift, scale, nodes_per_region, params, layers, privileged, summaries, valid):
    batch, num_nodes = mask.shape
    x = np.empty((batch, num_nodes, NODE_WIDTH), dtype=np.float32)
    _summaries(obs, mask, shift, scale, nodes_per_region, x, summaries, valid)
    return _critic(summaries, privileged, params, layers)


def warm_cache() -> None:
    """Compile (or load from the cache) every kernel of the acting path, in this process:
    a driver that calls it before starting the clients leaves them a full cache."""
    from fedmc_flwr.policies.advantages import gae
    from fedmc_flwr.policies.moments import Moments
    from fedmc_flwr.policies.normalisers import ObservationNorm
    from fedmc_flwr.policies.privileged import WIDTH, hidden_state

    regions, nodes, hidden = 2, 2, 2
    obs = np.zeros((1, regions * nodes * NODE_WIDTH + GLOBAL_WIDTH), dtype=np.float32)
    mask = np.ones((1, regions * nodes), dtype=np.bool_)
    shift, scale = np.zeros(NODE_WIDTH + GLOBAL_WIDTH), np.ones(NODE_WIDTH + GLOBAL_WIDTH)
    params = np.zeros(64, dtype=np.float32)
    layers = np.array([[0, SUMMARY_WIDTH, hidden, 0], [0, hidden, 1, 0]], dtype=np.int64)
    summaries = np.empty((1, regions, SUMMARY_WIDTH), dtype=np.float32)
    valid = np.empty((1, regions), dtype=np.bool_)
    rows = np.empty((1, nodes, ROW_WIDTH), dtype=np.float32)
    outputs = (
        np.empty(1, dtype=np.int64),
        np.empty(1, dtype=np.float32),
        np.empty(1, dtype=np.float32),
        summaries,
        valid,
        rows,
        np.empty((1, nodes), dtype=np.bool_),
    )
    noise = np.full((1, regions + nodes), 0.5, dtype=np.float32)
    weights = (params, layers, layers, layers)
    privileged = np.zeros((1, 0), dtype=np.float32)
    decide(obs, mask, shift, scale, nodes, *weights, noise, False, False, privileged, *outputs)
    values(obs, mask, shift, scale, nodes, params, layers, privileged, summaries, valid)
    Moments.of(np.zeros((2, 1))).merge(Moments.of(np.ones((2, 1))))
    ObservationNorm().update(np.zeros((2, obs.shape[1]), dtype=np.float32))
    rollout = np.zeros((2, 1), dtype=np.float32)
    gae(rollout, rollout, rollout, np.zeros((2, 1), dtype=np.bool_), 0.9, 0.9)
    costs = np.ones((1, regions * nodes))
    hidden = np.empty((1, WIDTH), dtype=np.float32)
    hidden_state(np.ones(1), costs, mask, costs.copy(), 1.0, hidden)
