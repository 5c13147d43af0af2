"""Reading YAML files: the one reader (`read_yaml`) of every kind of file the product
takes (experiment, sweep, integration), `inherits:` chains, dotted overrides, and where the
shipped configs are (`shipped_conf`, `find_config`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from fedmc_flwr.config.checks import TRACE_FILES, check_ranges
from fedmc_flwr.config.schema import ConfigError, ExperimentConfig

_KEY_LIKE = re.compile(r"[A-Za-z_][\w.\[\]-]{0,63}")
"""What a config key looks like, so that an error may name it."""


def _resolve_world_files(cfg: DictConfig, path: Path) -> None:
    """Relative trace file paths are taken from the config file's directory, so a run's
    processes find them wherever they start."""
    for key in TRACE_FILES:
        cfg.world[key] = _resolved(cfg.world[key], path.parent)


def _resolved(path: str, base: Path) -> str:
    """A config's file path, relative ones taken from the config file's directory."""
    if not path:
        return path
    given = Path(path).expanduser()
    return str(given if given.is_absolute() else (base / given).resolve())


def _describe(exc: OmegaConfBaseException) -> str:
    """The key an error is about and OmegaConf's first line, but never a file's content: a
    file that is not a config (say, `--config /etc/passwd`) parses as one long unknown key,
    which is named only when it looks like a key."""
    key = str(getattr(exc, "full_key", None) or "")
    if not _KEY_LIKE.fullmatch(key):
        return "holds an entry that is not a config key (not shown)"
    if isinstance(exc, ConfigKeyError):
        return f"{key}: not a config key"
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"{key}: {message[:200]}"


def _read_yaml(path: Path, what: str, inherits: bool, chain: tuple[Path, ...] = ()) -> DictConfig:
    """Read one YAML file and, if `inherits`, first the file it inherits from (recursively)."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such {what}")
    if path in chain:
        raise ConfigError(f"{path}: inherits from itself through {' -> '.join(map(str, chain))}")
    try:
        raw = OmegaConf.load(path)
    except Exception as exc:  # YAML syntax errors come from several libraries
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"{path}: not valid YAML ({first})") from None
    if not isinstance(raw, DictConfig):
        raise ConfigError(f"{path}: expected a mapping of keys at the top level")
    parent = raw.pop("inherits", None) if inherits else None
    if parent is None:
        return raw
    base = _read_yaml((path.parent / str(parent)).resolve(), what, inherits, (*chain, path))
    return OmegaConf.merge(base, raw)  # type: ignore[return-value]


def _misfit(schema: type, raw: DictConfig) -> str:
    """Which top-level key holds a mapping where `schema` has a list, or the reverse
    (OmegaConf's merge says only "incompatible container types")."""
    base = OmegaConf.structured(schema)
    for key in raw:
        try:
            OmegaConf.merge(base, OmegaConf.masked_copy(raw, [key]))
        except (TypeError, ValueError, OmegaConfBaseException):
            shown = key if _KEY_LIKE.fullmatch(str(key)) else "an entry (not shown)"
            return f"{shown}: a mapping where a list belongs, or the reverse"
    return "a mapping where a list belongs, or the reverse"


def read_yaml(
    path: str | Path,
    schema: type,
    what: str,
    overrides: Iterable[str] = (),
    inherits: bool = False,
) -> DictConfig:
    """Read a YAML file of any kind (experiment, sweep, integration) into its `schema`;
    `ConfigError` in one line on any problem.

    Why one reader: every file gets the same guards. Unknown keys and wrong types name the
    key, never the file's content (`--config /etc/passwd` echoes nothing), and `${...}`
    interpolations are refused anywhere, overrides included, since OmegaConf would resolve
    them from the environment. `what` names the kind in "no such ..."; `overrides` are
    dotted `key=value` strings applied after the file; `inherits` lets a file start from
    another (`inherits: other.yaml`, next to it).
    """
    path = Path(path).resolve()
    source = str(path)
    raw = _read_yaml(path, what, inherits)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), raw)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{source}: {_describe(exc)}") from None
    except (TypeError, ValueError):  # a mapping where the schema has a list, or the reverse
        raise ConfigError(f"{source}: {_misfit(schema, raw)}") from None
    for item in overrides:
        key = item.split("=", 1)[0]
        if "=" not in item or not _KEY_LIKE.fullmatch(key):
            shown = repr(item) if len(item) <= 80 else repr(item[:77] + "...")
            raise ConfigError(f"override {shown}: expected key=value with a dotted config key")
        try:
            merged = OmegaConf.merge(merged, OmegaConf.from_dotlist([item]))
        except OmegaConfBaseException as exc:
            raise ConfigError(f"{source} (override): {_describe(exc)}") from None
        except (TypeError, ValueError):
            raise ConfigError(
                f"override {key}: a mapping where a list belongs, or the reverse"
            ) from None
        except yaml.YAMLError:
            raise ConfigError(f"override {key}: its value is not valid YAML") from None
    _refuse_interpolations(OmegaConf.to_container(merged, resolve=False), source, "")
    return merged  # type: ignore[return-value]


def shipped_conf() -> Path:
    """Where the shipped configs are: `fedmc_flwr/conf/` in an installed wheel (package
    data), `conf/` at the root of a checkout."""
    package = Path(__file__).resolve().parents[1]
    packaged = package / "conf"
    return packaged if packaged.is_dir() else package.parent / "conf"


def find_config(path: str | Path) -> Path:
    """The config file `path` names: the file itself when it exists; else, for a relative
    `conf/...` path (the `--config` default among them), the shipped config of that name,
    so that an installed `fedmc` works from any directory. `ConfigError` when neither
    exists, naming the shipped configs of that folder (a typo's fix is among them); any
    other missing path is left for `load_config` to name."""
    given = Path(path).expanduser()
    if given.is_file() or given.is_absolute() or given.parts[:1] != ("conf",):
        return given
    shipped = shipped_conf().joinpath(*given.parts[1:])
    if not shipped.is_file():
        folder = Path(*given.parts[:-1])
        names = sorted(p.name for p in shipped.parent.glob("*.yaml"))
        ships = ", ".join(str(folder / n) for n in names) if names else "none there"
        raise ConfigError(
            f"{given}: no such config file here, nor among the shipped configs; they are: {ships}"
        )
    return shipped


def load_config(path: str | Path, overrides: Iterable[str] = ()) -> ExperimentConfig:
    """Load, merge and validate an experiment config; raise `ConfigError` on any problem.

    `overrides` are dotted `key=value` strings, applied after the file (and what it inherits).
    Trace file paths are resolved here; the files are read by the world
    (`sim.sources.check_files`, which each command calls on the config it loads).
    """
    merged = read_yaml(path, ExperimentConfig, "config file", overrides, inherits=True)
    check_ranges(merged, str(Path(path).resolve()))
    _resolve_world_files(merged, Path(path).resolve())
    return OmegaConf.to_object(merged)  # type: ignore[return-value]


def _refuse_interpolations(value: object, source: str, key: str) -> None:
    """No `${...}` anywhere: OmegaConf would resolve it (environment variables included),
    so a config could pull values from outside itself. A config says its values."""
    if isinstance(value, dict):
        for name, item in value.items():
            _refuse_interpolations(item, source, f"{key}.{name}" if key else str(name))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _refuse_interpolations(item, source, f"{key}[{index}]")
    elif isinstance(value, str) and "${" in value:
        shown = key if _KEY_LIKE.fullmatch(key) else "a value"
        raise ConfigError(f"{source}: {shown}: interpolations ('${{...}}') are not allowed")


def to_yaml(cfg: ExperimentConfig) -> str:
    """The fully resolved config, as saved next to the results it produced."""
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))
