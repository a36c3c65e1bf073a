"""A config file of lab settings (`--config`, TOML or JSON): read it, and say where each value came from (the file and
line) or, when it cannot be read, the file, the format expected, and the line and column."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

CONFIG_FORMATS = {".toml": "TOML", ".json": "JSON"}


def line_of_key(text: str, key: str, suffix: str) -> int | None:
    pattern = rf'^\s*"{re.escape(key)}"\s*:' if suffix == ".json" else rf'^\s*"?{re.escape(key)}"?\s*='
    for number, line in enumerate(text.splitlines(), 1):
        if re.search(pattern, line) or (suffix == ".json" and f'"{key}"' in line):
            return number
    return None


def read_config_file(path: Path) -> tuple[dict, dict]:
    """(settings, where each came from: 'PATH line N') from a TOML or JSON file; ConfigFileError in words
    (the file, the format expected, the line and column) when it cannot be read."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in CONFIG_FORMATS:
        raise ConfigFileError(
            f"--config {path}: a config file is TOML (a name ending .toml) or JSON (.json), the two accepted; "
            f"this one ends {suffix or 'without a suffix'}"
        )
    form = CONFIG_FORMATS[suffix]
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigFileError(f"--config {path}: no such file") from None
    except IsADirectoryError:
        raise ConfigFileError(f"--config {path}: a folder, not a {form} file") from None
    except OSError as error:
        raise ConfigFileError(f"--config {path}: could not be read ({error.strerror})") from None
    except UnicodeDecodeError as error:
        raise ConfigFileError(f"--config {path}: not UTF-8 text (byte {error.start}), so not {form}") from None
    try:
        data = tomllib.loads(text) if form == "TOML" else json.loads(text)
    except tomllib.TOMLDecodeError as error:
        where = re.search(r"\(at line (\d+), column (\d+)\)", str(error))
        at = f"line {where[1]}, column {where[2]}" if where else "somewhere"
        raise ConfigFileError(f"--config {path}: not valid TOML at {at}: {str(error).split(' (at ')[0]}") from None
    except json.JSONDecodeError as error:
        raise ConfigFileError(
            f"--config {path}: not valid JSON at line {error.lineno}, column {error.colno}: {error.msg}"
        ) from None
    if not isinstance(data, dict):
        raise ConfigFileError(
            f"--config {path}: the {form} must be an object of settings (name: value), not a {type(data).__name__}"
        )
    sources = {key: f"{path}" + (f" line {line}" if (line := line_of_key(text, key, suffix)) else "") for key in data}
    return data, sources


class ConfigFileError(ValueError):
    pass
