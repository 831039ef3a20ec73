"""The JSON form shared by every result model: the run report, the plan, tune's result, preflight's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainmedic._os import write_text_atomically


class JsonDocument:
    """``to_json`` / ``write_json`` for a model that has ``to_dict()``; written atomically."""

    #: Whether NaN and infinity may reach the JSON (a model that promises finite numbers says no).
    ALLOW_NAN = True

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=self.ALLOW_NAN)

    def write_json(self, path: str | Path) -> Path:
        return write_text_atomically(Path(path), self.to_json() + "\n")
