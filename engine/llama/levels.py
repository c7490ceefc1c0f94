"""Record the pinned llama-server at every verbosity level (`-lv 0` to `-lv 4`, with stamps and level letters,
and router mode at `-lv 4`)
under the recorder's workload (spyglass/engine/llama/record.py): the logs of tests/fixtures/llama_levels/, on
which tests/test_llama_noise.py measures the drift alarm's noise floor (the share of a real run's lines that
count as unreadable, per level; docs/llama-server.md) and from which the noise catalogue takes its shapes.

Run `scripts/record-levels` (the pinned build is built first if it is not cached).
"""

from __future__ import annotations

import json
import shutil
import sys

from spyglass.engine.llama.build import REPO_ROOT, ensure_built
from spyglass.engine.llama.model import ensure_model
from spyglass.engine.llama.record import Mode, help_text, record_mode
from spyglass.engine.llama.versions import PINNED, version

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "llama_levels"
LEVELS = range(5)  # llama.cpp's common/log.h: 0 output, 1 error, 2 warn, 3 info (the default), 4 debug


def record_levels(name: str = PINNED) -> None:
    row = version(name)
    build, model = ensure_built(name, progress=True), ensure_model(split_experts=row.split_experts)
    out = FIXTURES / name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    flags_known = help_text(build)
    logs = {}
    stamped = ("--log-prefix", "--log-timestamps")
    modes = [Mode(f"lv{level}", (*stamped, "-lv", str(level)), log_file=True) for level in LEVELS]
    modes.append(Mode("router-lv4", (*stamped, "-lv", "4"), log_file=True, router=True))  # the router's and a child's
    for mode in modes:
        print(f"recording {name} {mode.name}", file=sys.stderr)
        logs[mode.name] = record_mode(build, row, mode, model, out, flags_known)
        for body in ("metrics.txt", "slots.json", "slots-busy.json", "props.json"):
            (out / mode.name / body).unlink(missing_ok=True)  # the matrix's fixtures hold the bodies
    (out / "expected.json").write_text(json.dumps({"llama_cpp_python": name, "logs": logs}, indent=1) + "\n")


if __name__ == "__main__":
    record_levels(*sys.argv[1:2])
