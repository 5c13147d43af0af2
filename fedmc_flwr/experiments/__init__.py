"""Making results: the commands that train, evaluate and compare policies.

`training` (centralised and local-only PPO), `baselines` (every dispatcher), `transfer` (a
policy on another estate), `arena` (every region's policy on one shared estate) and
`sweep` (variants x training seeds, resumable). Federated runs live in `federation/`;
these modules call it, never the other way round.
"""
