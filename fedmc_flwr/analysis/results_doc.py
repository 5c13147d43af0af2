"""docs/results.md and the README's headline table, written from the sweeps' own summaries.

Nothing in them is typed by hand: each section is a sweep file's own description (its
leading comment), one provenance line (the command, the commit its cells ran at and
whether the tree differed from it, the date; `provenance.json`, written when the sweep
started its cells) and the `summary.md` (and `arena.md`) that `fedmc sweep` wrote. A sweep
without a summary says so and names the command that measures it. The README gets the
headline sweep's tables between two markers, without the provenance line, which stays in
docs/results.md (the one generated place for commits and dates).

"What federating buys" opens the page: one row per setting of `FEDERATING`, the federated
learner against local-only and centralised PPO on the same worlds (`analysis.federating`),
computed from the sweeps' finished cells. "What federating costs" follows, from the same
cells: the bytes each region exchanges per round and the round's wall time beside the
regions' own training time.

The optimum (`make optimum`: `bench/bench_optimum.py`, the exact optimal dispatcher of
small queueing systems against SED, JSQ and the default learner) gets a section from
`results/optimum/`, one part per folder (`table/`, `learner/`), each under its own
provenance line.

A section whose results this checkout does not hold keeps its text as last published (its
provenance line names the commit it ran at), marked as kept, rather than turning into
"Not measured yet": `make report` on a machine that ran some sweeps updates those and
loses nothing of the others. The same holds for a setting's rows and reading in "What
federating buys".

Zero-shot transfers (`make transfers`: each training seed's federated policy of the default
sweep, unchanged, on a bigger estate) get a section each from their folder under
`results/transfers/`, described by the target config's own leading comment.

    python -m fedmc_flwr.analysis.results_doc [--sweeps default ...] [--transfers 10x20 ...]
        [--out docs/results.md] [--readme README.md]
"""

from __future__ import annotations

import argparse
import itertools
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from fedmc_flwr.analysis import speedup
from fedmc_flwr.analysis.federating import (
    Gain,
    costs_table,
    federating_costs,
    federating_gains,
    gains_table,
    why_it_does_not_pay,
)
from fedmc_flwr.errors import InputError
from fedmc_flwr.results import read_provenance
from fedmc_flwr.sweeps import load_sweep

SWEEPS_DIR = Path("conf/sweeps")
TRANSFERS_DIR = Path("results/transfers")
OPTIMUM_DIR = Path("results/optimum")
SPEEDUPS = (
    Path("conf/speedup.yaml"),
    Path("conf/speedup_server_step.yaml"),
    Path("conf/speedup_fedexp.yaml"),
    Path("conf/speedup_one_update_fedexp.yaml"),
    Path("conf/speedup_one_update_server_step.yaml"),
    Path("conf/speedup_pooled.yaml"),
    Path("conf/speedup_one_update_server_step_region1.yaml"),
    Path("conf/speedup_pooled_region1.yaml"),
    Path("conf/speedup_one_update_server_step_region2.yaml"),
    Path("conf/speedup_pooled_region2.yaml"),
    Path("conf/speedup_one_update_server_step_region6.yaml"),
    Path("conf/speedup_pooled_region6.yaml"),
    Path("conf/speedup_one_update_server_step_region3.yaml"),
    Path("conf/speedup_pooled_region3.yaml"),
    Path("conf/speedup_one_update_server_step_region7.yaml"),
    Path("conf/speedup_pooled_region7.yaml"),
    Path("conf/speedup_one_update_server_step_region5.yaml"),
    Path("conf/speedup_pooled_region5.yaml"),
    Path("conf/speedup_one_update_server_step_region8.yaml"),
    Path("conf/speedup_pooled_region8.yaml"),
    Path("conf/speedup_one_update_server_step_region4.yaml"),
    Path("conf/speedup_pooled_region4.yaml"),
    Path("conf/speedup_one_update_server_step_region9.yaml"),
    Path("conf/speedup_pooled_region9.yaml"),
    Path("conf/speedup_one_update_server_step_envs8.yaml"),
    Path("conf/speedup_together.yaml"),
    Path("conf/speedup_pooled_together.yaml"),
    Path("conf/speedup_together_region1.yaml"),
    Path("conf/speedup_together_region2.yaml"),
)
"""The speed-up files whose results the page shows: FedAvg, then the server's own step, fixed
and FedExP's, after every fourth update of a region, then FedExP's and fixed after every
one, then the same experience pooled in one learner (the reference); then the fixed step
and the pooled learner again on every other region's worlds (the last six at 1 and 8
regions only); then the fixed step with regions of 8 envs; then a federation whose
regions take a larger step than one region alone (`together`), the pooled learner at that
step, and the federation again on two other regions' worlds."""
OPTIMUM_PARTS = (
    ("table", "The optimum against SED, JSQ and random, solved exactly"),
    ("learner", "The CLI's learner against the optimum, in the world made that system"),
)
"""`bench/bench_optimum.py`'s parts: (folder under OPTIMUM_DIR, heading)."""
HEADLINE = "default"
"""The sweep whose tables the README shows."""
BEGIN, END = "<!-- headline results: begin -->", "<!-- headline results: end -->"
FEDERATING = (
    "default",
    "personal_balanced",
    "personal_busy_region",
    "personal_skewed_prices_carbon",
    "personal_outages",
    "late_region",
    "data_poor_region",
    "rare_events",
    "rare_events_at1",
    "rare_events_at2",
    "rare_slowdowns",
    "rare_slowdowns_at1",
    "rare_slowdowns_at2",
    "rare_slowdowns_at1_rollout32",
    "drift_region",
    "many_small_regions",
)
"""The settings of "What federating buys" and "What federating costs": small_demo, the four
non-IID settings, the late region, the data-poor region, events some regions never
trained on (outages and slowdowns, each met in training by each region in turn), a
drifting workload and many small regions."""
FEDERATING_INTRO = """## What federating buys

Each row is one federated variant of one setting's sweep (FedAvg, and where the sweep
has them the personalised variants) against the same setting's local-only learners
(one per region, no aggregation) and centralised PPO (one learner on every region's
worlds, the raw data pooled), at the last round, paired per test world over the training
seeds. A late region (`federation.join_rounds`) and a data-poor one (`train.step_share`)
are judged on their own worlds only, where centralised PPO, which pools every region from
round 1, does not apply; for the late region the next columns give the difference at its
first evaluation and how many rounds (and seconds of its training) each learner needs
from joining until it beats SED there. Where regions train on other worlds than they are
judged on (`train.experience`: `rare_events`, whose test worlds have outages that only
us-east1 meets in training, and `rare_slowdowns`, whose nodes slow down unmasked; the
`_at1` and `_at2` settings give the events to the second or third region instead), the
regions that never trained on their test worlds' events and those that did get a row
each; every learner, local-only and centralised too, trains each region on its own
training worlds, and the last column, centralised minus local-only PPO, says whether the
pooled experience helps there at all; `rare_slowdowns_at1_rollout32` repeats
`rare_slowdowns_at1` with every learner updating on rollouts of 32 steps instead of 128,
and `rare_slowdowns_tries` (its section below) tries the server's own step, more rounds
and SCAFFOLD's drift correction on its validation worlds (`drift_correction` and
`drift_correction_busy_region` try SCAFFOLD on ten small regions and beside a busy
region; `many_small_regions_tries` tries fine-tuning and shorter rollouts there against
the regions' own learners, `many_small_regions_steps` the server's step, fixed and
FedExP's, and more rounds against centralised PPO; `default_fedexp` and
`rare_slowdowns_fedexp` try FedExP's step where regions differ and where one region meets
rare slowdowns; `rare_slowdowns_transfer` tries advantage scaling, the gradient clip,
more updates per round and FedAdam there against centralised PPO, and
`rare_slowdowns_spread` gives every learner the same slowdown experience held by one
region or spread over all three). A drifting region
(`train.drift`: `drift_region`, whose load rises in round 4) is judged on its own worlds,
against centralised PPO too (it lives through the drift as well), with the difference at
the round of the change in the "at first evaluation" column and the rounds each learner
needs from the change until it beats SED again. "pays": the 95% interval is above 0;
"costs": below; otherwise the sweeps cannot tell the two apart.
"""
COSTS_INTRO = """## What federating costs

What each region sends and receives and how long a round takes, read from the federated
cells of the same sweeps: the bytes of arrays per region and round in each direction (the
global network and its observation and return statistics down, the region's update of the
same arrays up; the round's checkpoint holds them), and the round's training wall time,
from sending the global weights to aggregating the replies, beside each region's own
training time in that round, which is what a local-only learner of the same steps spends.
Means over rounds and training seeds. The regions of one sweep cell share the machine's
cores, so a round also waits on regions queued behind others for a core, not only on the
exchange and the aggregation.
"""

NOT_MEASURED = "Not measured yet"
SPEEDUP_OVERVIEW_HEAD = "## The speed-up of federation, file by file\n\n"
SPEEDUP_OVERVIEW_INTRO = """Steps per env of each region until the federated greedy policy beats SED
on the validation worlds of the region named (paired over the held-out worlds, 95%
interval above 0), the mean over the training seeds; "> n": a seed did not within the
budget of n. The last column is the largest federation's steps as a share of one
region's (linear speed-up: 1/8 = 0.125 at 8 regions; the target: at most 0.25). One
region learns alone in every file, with no server step, so files of the same schedule
and region share their one-region column; a pooled file's k is one learner on k
regions' worth of envs, the same experience a federation of k collects. Under the table,
each federated file against the pooled file of its region and schedule, seed by seed:
whether the federation needs fewer steps than the same experience pooled."""
KEPT = "*Kept as last published: this checkout holds none of its results.*"


def published_sections(text: str) -> dict[str, str]:
    """A page's `## ` sections by heading line, each with its whole body."""
    parts = re.split(r"(?m)^(?=## )", text)
    return {part.splitlines()[0]: part.rstrip() + "\n" for part in parts if part.startswith("## ")}


def kept_or_new(new: str, published: dict[str, str]) -> str:
    """`new`, or where it measures nothing and the page had this section measured, the
    published section, marked as kept."""
    heading = new.splitlines()[0]
    old = published.get(heading)
    if NOT_MEASURED not in new or old is None or NOT_MEASURED in old:
        return new
    if KEPT in old:
        return old
    return f"{heading}\n\n{KEPT}\n\n{old[len(heading) :].lstrip()}"


def published_rows(
    text: str, setting: str, heading: str = "## What federating buys"
) -> tuple[list[str], list[str]]:
    """The table rows and reading lines of `setting` in the page's section `heading`."""
    section = published_sections(text).get(heading, "")
    rows = [
        line
        for line in section.splitlines()
        if line.startswith(f"| `{setting}` |") and "not measured yet" not in line
    ]
    reading = [line for line in section.splitlines() if line.startswith(f"- `{setting}` (")]
    return rows, reading


INTRO = """# Results

Generated by `make results` (which runs every sweep below, skipping finished cells) or
`make report` (which only summarises them): every table is a sweep's own `summary.md`,
under the line that names the command and the commit its cells ran at. Rewards are per
job and higher is better. Levels are means over training seeds with 95% CIs over those
seeds; differences are paired per held-out world (`docs/design.md`, "How results are
judged"). Test worlds report; validation worlds (`eval.split=validation`) only tune.
"""


def description(config_file: Path) -> str:
    """A sweep's or a config's leading comment, as one paragraph; the command that runs
    it, its last sentence ("`fedmc ...`" or "`fedmc ...` measures it."), is left out
    (the provenance line names it), and a command the text names on the way stays."""
    lines = []
    for line in config_file.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return re.sub(r"\s*`fedmc [^`]*`(\s+measures it)?[.\s]*$", "", " ".join(lines)).strip()


def provenance_line(out_dir: Path) -> str:
    """The command, commit(s) and start of what made a folder's results: its own
    `provenance.json`, or its subfolders' (a transfer per training seed)."""
    stamps = [read_provenance(out_dir)]
    if stamps[0] is None:
        stamps = [read_provenance(child) for child in sorted(out_dir.glob("*/"))]
    stamps = [stamp for stamp in stamps if stamp]
    if not stamps:
        return "*Provenance not recorded (cells run before sweeps recorded it).*"
    commits = ", ".join(
        f"`{commit}`" + (" (with local changes)" if dirty else "")
        for commit, dirty in sorted({(s["commit"], bool(s.get("dirty"))) for s in stamps})
    )
    runs = f"{len(stamps)} runs like " if len(stamps) > 1 else ""
    started = min(stamp["started"] for stamp in stamps)
    return f"*{runs}`{stamps[0]['command']}` at commit {commits}, started {started}.*"


def section(name: str, sweeps_dir: Path = SWEEPS_DIR) -> str:
    path = sweeps_dir / f"{name}.yaml"
    sweep = load_sweep(path)
    head = f"## `{name}`\n\n{description(path)}\n\n"
    summary = sweep.out_dir / "summary.md"
    if not summary.is_file():
        return head + f"Not measured yet: `fedmc sweep --config {path}` measures it.\n"
    body = [provenance_line(sweep.out_dir), summary.read_text().strip()]
    arena = sweep.out_dir / "arena.md"
    if arena.is_file():
        body.append("In the joint arena:\n\n" + arena.read_text().strip())
    return head + "\n\n".join(body) + "\n"


def measured(head: str, folder: Path, command: str, level: int = 2) -> str:
    """`head`, then `folder`'s provenance line and summary.md, or the `command` that
    would measure it. The summary's own headings go one level below `level` (its `#`s), so
    that the page's `## ` sections stay whole."""
    summary = folder / "summary.md"
    if not summary.is_file():
        return head + f"{NOT_MEASURED}: `{command}` measures it.\n"
    text = re.sub(r"(?m)^## ", "#" * (level + 1) + " ", summary.read_text().strip())
    return head + provenance_line(folder) + "\n\n" + text + "\n"


def transfer_section(target: str, transfers_dir: Path = TRANSFERS_DIR) -> str:
    """A zero-shot transfer's section: `results/transfers/transfer_<target>/summary.md`,
    the `fedmc report` of its training seeds' folders."""
    config = Path("conf") / f"transfer_{target}.yaml"
    head = f"## Zero-shot transfer to {target} (`{config}`)\n\n{description(config)}\n\n"
    return measured(head, transfers_dir / f"transfer_{target}", "make transfers")


def optimum_section(optimum_dir: Path = OPTIMUM_DIR) -> str:
    """The optimum's section: conf/optimum.yaml's description, then each part of
    `bench/bench_optimum.py` under its heading."""
    config = Path("conf/optimum.yaml")
    parts = [f"## The optimum where one exists (`{config}`)\n\n{description(config)}\n"]
    parts += [
        measured(f"### {heading}\n\n", optimum_dir / part, f"make optimum PART={part}", 3)
        for part, heading in OPTIMUM_PARTS
    ]
    return "\n".join(parts)


def speedup_section(
    config: Path = SPEEDUPS[0], results_dir: Path = Path("results"), docs: Path = Path("docs")
) -> str:
    """The speed-up of federation measured by one speed-up file: its description, then the
    table and the plot (written to `docs`, named as the file) from the speedup.csv under
    `results_dir` (each shipped file names its plan as the file is named)."""
    head = f"## The speed-up of federation (`{config}`)\n\n{description(config)}\n\n"
    folder = results_dir / config.stem
    csv = folder / speedup.SPEEDUP_FILE
    if not csv.is_file():
        return head + f"{NOT_MEASURED}: `fedmc speedup --config {config}` measures it.\n"
    frame = speedup.read_speedup(csv)
    image = speedup.plot(frame, docs / f"{config.stem}.png")
    return (
        f"{head}{provenance_line(folder)}\n\n{speedup.markdown(frame)}\n"
        f"![Steps to beat SED against the regions]({image.name})\n"
    )


def speedup_overview(
    configs: Sequence[Path] = SPEEDUPS, results_dir: Path = Path("results"), published: str = ""
) -> str:
    """Every measured speed-up file in one table (`speedup.overview`), each row read from
    its folder's plan: the section a reader compares the files in. A file this checkout
    holds no results of keeps the row and lines the `published` page gave it."""
    folders = {str(config): results_dir / config.stem for config in configs}
    unmeasured = [
        name for name, folder in folders.items() if not (folder / speedup.SPEEDUP_FILE).is_file()
    ]
    if len(unmeasured) == len(folders):
        return SPEEDUP_OVERVIEW_HEAD + f"{NOT_MEASURED}: `make speedup` measures it.\n"
    old = published_sections(published).get(SPEEDUP_OVERVIEW_HEAD.strip(), "")
    rows = {row["file"].strip("`"): row for row in published_table(old)}
    kept = {name: rows[name] for name in unmeasured if name in rows}
    # A seed-by-seed line is kept only where neither file it pairs was measured here:
    # one measured side would make its means stale.
    kept_lines = [
        line
        for line in old.splitlines()
        if line.startswith("- ")
        and (paired := {name for name in folders if f"`{name}`" in line})
        and paired <= kept.keys()
    ]
    table = speedup.overview(list(folders.items()), kept, kept_lines)
    return (
        f"{SPEEDUP_OVERVIEW_HEAD}{SPEEDUP_OVERVIEW_INTRO}\n\n{table}"
        + _kept_note([f"`{name}`" for name in kept])
        + "\nEach file's own section below gives the steps of every seed and the return at "
        "the budget.\n"
    )


def published_table(section: str) -> list[dict[str, str]]:
    """The rows of the first table in a page's section, each by its column's heading."""
    lines = list(
        itertools.takewhile(
            lambda line: line.startswith("|"),
            itertools.dropwhile(lambda line: not line.startswith("|"), section.splitlines()),
        )
    )
    if len(lines) < 2:
        return []
    header, *rows = ([cell.strip() for cell in line.strip("|").split("|")] for line in lines)
    return [dict(zip(header, row, strict=False)) for row in rows[1:]]


def _kept_note(kept: Sequence[str]) -> str:
    """The line under a federating table that names the settings whose rows are kept."""
    if not kept:
        return ""
    return (
        f"\nRows of {', '.join(kept)} are kept as last published: this checkout holds "
        "none of their cells (their sections below name the commits they ran at).\n"
    )


def federating_section(
    names: Sequence[str] = FEDERATING, sweeps_dir: Path = SWEEPS_DIR, published: str = ""
) -> str:
    """ "What federating buys": a row per setting, its rows as `published` when this
    checkout has none of its cells, or the command that would measure it; and for each
    setting where federating does not pay, why (`why_it_does_not_pay`)."""
    rows: list = []
    measured: list[Gain] = []
    kept_reading: dict[str, list[str]] = {}
    kept: list[str] = []
    for name in names:
        path = sweeps_dir / f"{name}.yaml"
        gains = federating_gains(load_sweep(path))
        measured += gains
        old_rows, old_reading = published_rows(published, name) if not gains else ([], [])
        if old_rows:
            kept.append(f"`{name}`")
            kept_reading[name] = old_reading
        rows += gains or old_rows or [(name, f"not measured yet: `fedmc sweep --config {path}`")]
    note = _kept_note(kept)
    reading = why_it_does_not_pay(measured, kept_reading, order=names)
    return FEDERATING_INTRO + "\n" + gains_table(rows) + note + (f"\n{reading}" if reading else "")


def costs_section(
    names: Sequence[str] = FEDERATING, sweeps_dir: Path = SWEEPS_DIR, published: str = ""
) -> str:
    """ "What federating costs": a row per federated variant of each setting, its rows as
    `published` when this checkout has none of its cells, or the command that measures it."""
    rows: list = []
    kept: list[str] = []
    for name in names:
        path = sweeps_dir / f"{name}.yaml"
        costs = federating_costs(load_sweep(path))
        old_rows = [] if costs else published_rows(published, name, COSTS_INTRO.splitlines()[0])[0]
        if old_rows:
            kept.append(f"`{name}`")
        rows += costs or old_rows or [(name, f"not measured yet: `fedmc sweep --config {path}`")]
    note = _kept_note(kept)
    return COSTS_INTRO + "\n" + costs_table(rows) + note


def write_results(
    names: Sequence[str],
    out: Path,
    sweeps_dir: Path = SWEEPS_DIR,
    transfers: Sequence[str] = (),
    federating: Sequence[str] = FEDERATING,
    optimum_dir: Path | None = OPTIMUM_DIR,
) -> Path:
    page = out.read_text() if out.is_file() else ""
    published = published_sections(page)
    # The two federating sections keep their settings' rows themselves (row by row).
    federating_part = [
        federating_section(federating, sweeps_dir, page),
        costs_section(federating, sweeps_dir, page),
    ]
    sections = [
        speedup_overview(published=page),
        *(speedup_section(config, docs=out.parent) for config in SPEEDUPS),
        *(section(name, sweeps_dir) for name in names),
    ]
    if optimum_dir is not None:
        sections.append(optimum_section(optimum_dir))
    sections += [transfer_section(target) for target in transfers]
    sections = [*federating_part, *(kept_or_new(new, published) for new in sections)]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(INTRO + "\n" + "\n".join(sections))
    return out


def update_readme(readme: Path, sweeps_dir: Path = SWEEPS_DIR) -> None:
    """Replace the README's headline block with the headline sweep's summary; a checkout
    without the sweep's results keeps the block as last published, as docs/results.md
    keeps its sections."""
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        raise InputError(f"{readme}: no headline block ({BEGIN} ... {END})")
    head, rest = text.split(BEGIN, 1)
    published, tail = rest.split(END, 1)
    sweep = load_sweep(sweeps_dir / f"{HEADLINE}.yaml")
    summary = sweep.out_dir / "summary.md"
    if summary.is_file():
        table = summary.read_text().strip()
    elif published.strip():
        return
    else:
        table = f"Not measured yet: `make results` measures it (`{HEADLINE}` sweep)."
    readme.write_text(f"{head}{BEGIN}\n{table}\n\n{END}{tail}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", nargs="+", default=[HEADLINE])
    parser.add_argument("--transfers", nargs="*", default=[])
    parser.add_argument("--out", type=Path, default=Path("docs/results.md"))
    parser.add_argument("--readme", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        print(write_results(args.sweeps, args.out, transfers=args.transfers))
        if args.readme is not None:
            update_readme(args.readme)
            print(args.readme)
    except (InputError, OSError) as exc:
        print(f"fedmc: results doc: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
