"""The memory plan's child process: ``python -m trainmedic.preflight.plan_child ...``.

The user's build module runs its module-level code when it is imported: an argparse that parses
``sys.argv``, a ``sys.exit``, a dataset download that hangs. Inside ``trainmedic preflight`` that
would parse trainmedic's own arguments and exit the whole preflight; here it is one more child
with the experiment's budget and environment, run in the project root with ``sys.argv`` set to
the build file alone (as ``python model.py`` would see it), and whatever goes wrong becomes that
experiment's plan error.

Arguments: SPEC BATCH DEVICE PRECISION RESULT. RESULT is a JSON file written at the end, never
stdout (the user's module may print): ``{"plan": Plan.to_dict()}`` or ``{"error": text,
"frame": {"path", "line"} | null}``. No RESULT at all means the process died before writing it
(``os._exit``, a crash, killed at the end of its budget): the parent reads why from its files.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

from trainmedic._os import write_text_atomically


def main(argv: list[str]) -> int:
    spec, batch, device, precision, result = argv
    outcome = _plan(spec, int(batch), device, precision, Path.cwd())
    write_text_atomically(Path(result), json.dumps(outcome))
    return 0


def _plan(spec: str, batch: int, device: str, precision: str, root: Path) -> dict:
    what = "importing torch and trainmedic's planner"
    try:
        from trainmedic.errors import DeviceError, MissingExtraError, PlanError

        try:
            from trainmedic.plan import load_build, plan_memory
            from trainmedic.plan.spec import split_spec

            target, function, is_file = split_spec(spec)
            if is_file:
                path = Path(target) if Path(target).is_absolute() else root / target
                spec = f"{path}:{function}"
                sys.argv = [str(path)]
            else:  # package.module:build from the project, as `python -m` would find it
                sys.path.insert(0, str(root))
                sys.argv = [target]
            what = f"importing {target}"
            build = load_build(spec)
            what = f"{function}({batch})"
            plan = plan_memory(build, batch, device=device, precision=precision, measure_growth=False)
        except (MissingExtraError, PlanError, DeviceError) as exc:
            return {"error": str(exc), "frame": None}
        return {"plan": plan.to_dict()}
    except SystemExit as exc:
        code = exc.code if exc.code is not None else 0
        why = f"called sys.exit({code!r})" if not isinstance(code, int) else f"exited with code {code}"
        return {"error": f"{what} {why}", "frame": _user_frame(exc, root)}
    except BaseException as exc:  # noqa: BLE001 - anything the user's code raises is the plan's error
        return {"error": f"{what} raised {type(exc).__name__}: {exc}", "frame": _user_frame(exc, root)}


def _user_frame(exc: BaseException, root: Path) -> dict | None:
    """The innermost frame in a file of the project (not trainmedic's own, not a library's)."""
    from trainmedic.preflight.frames import Frame, innermost_user
    from trainmedic.userfiles import UserFiles

    frames = [Frame(f.filename, f.lineno or 0, f.name) for f in traceback.extract_tb(exc.__traceback__)]
    frame = innermost_user(frames, UserFiles([root]))
    return {"path": frame.path, "line": frame.line} if frame else None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
