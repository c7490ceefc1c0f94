"""Build llama.cpp's ``llama-server`` from PyPI's llama-cpp-python source distribution, CPU only.

The sdist of a pinned llama-cpp-python version carries the whole llama.cpp tree (``vendor/llama.cpp``).
``ensure_built()`` downloads it with pip, builds the ``llama-server`` target with cmake (``-j2`` under
``nice``) and caches the result under ``~/.cache/spyglass/llama.cpp/<version>/`` (``$XDG_CACHE_HOME`` if set),
outside the clone, so CI's fresh clone and a second checkout on the same machine reuse it: only a fresh machine
pays the build (about 12 CPU-minutes on two cores). Guarantees:

- the cache is complete or absent: the ``BUILT`` stamp is written last, after the binary answered
  ``--version``; a half-finished build is rebuilt;
- concurrent callers (two pytest workers) build once: an exclusive file lock serialises them;
- a missing compiler or cmake is a ``BuildError`` naming the Debian packages to install.

Run ``python -m spyglass.engine.llama.build`` to build (or find) it and print the binary's path.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from spyglass.engine.llama.versions import PINNED, LlamaVersion
from spyglass.engine.llama.versions import version as version_row

LLAMA_CPP_PYTHON_VERSION = PINNED
"""The pinned llama-cpp-python release whose ``vendor/llama.cpp`` is built."""

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_ROOT = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "spyglass" / "llama.cpp"
VOCAB_NAME = "ggml-vocab-llama-spm.gguf"


class BuildError(RuntimeError):
    """The engine cannot be built here; the message says what to install or what failed."""


@dataclass(frozen=True)
class LlamaBuild:
    """A finished, cached build: the binary, the folder its shared libraries are in, the vocabulary."""

    version: str
    root: Path

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def server(self) -> Path:
        return self.bin_dir / "llama-server"

    @property
    def vocab(self) -> Path:
        return self.root / VOCAB_NAME

    @property
    def stamp(self) -> Path:
        return self.root / "BUILT"

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """An environment in which the binary finds its shared libraries (they sit beside it)."""
        env = dict(os.environ if base is None else base)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(self.bin_dir), env.get("LD_LIBRARY_PATH", "")) if p)
        return env

    def info(self) -> dict[str, object]:
        """What the stamp recorded: version, build seconds, the binary's ``--version`` text."""
        info: dict[str, object] = json.loads(self.stamp.read_text())
        return info

    def is_complete(self) -> bool:
        """Stamped and its binary there (the vocabulary too where the sdist has one: 2024's have none)."""
        return self.stamp.is_file() and self.server.is_file()


def missing_tools() -> list[str]:
    """Debian packages whose commands the build needs and this machine lacks."""
    missing = []
    if shutil.which("cmake") is None:
        missing.append("cmake")
    if shutil.which("c++") is None and shutil.which("g++") is None:
        missing.append("g++")
    if shutil.which("make") is None and shutil.which("ninja") is None:
        missing.append("make")
    return missing


def _run(cmd: list[str], cwd: Path, log: Path) -> None:
    with log.open("ab") as out:
        out.write(f"$ {' '.join(cmd)}\n".encode())
        out.flush()
        result = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, check=False)
    if result.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-30:]
        raise BuildError(f"{cmd[0]} failed ({result.returncode}); the last lines of {log}:\n" + "\n".join(tail))


def _download_sdist(version: str, dest: Path, log: Path) -> Path:
    existing = sorted(dest.glob(f"llama_cpp_python-{version}.tar.gz"))
    if existing:
        return existing[0]
    dest.mkdir(parents=True, exist_ok=True)
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--dest",
            str(dest),
            f"llama-cpp-python=={version}",
        ],
        dest,
        log,
    )
    found = sorted(dest.glob("llama_cpp_python-*.tar.gz"))
    if not found:
        raise BuildError(f"pip download of llama-cpp-python=={version} left no sdist in {dest}")
    return found[0]


def _extract_vendor(sdist: Path, src: Path) -> Path:
    """Extract only ``vendor/llama.cpp`` of the sdist into ``src``; returns the llama.cpp folder."""
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name + "/"]
        tar.extractall(src, members=members, filter="data")
    found = sorted(src.glob("*/vendor/llama.cpp"))
    if not found:
        raise BuildError(f"{sdist.name} has no vendor/llama.cpp")
    return found[0]


def _compile(llama_src: Path, build_dir: Path, row: LlamaVersion, log: Path) -> None:
    nice = ["nice", "-n", "19"] if shutil.which("nice") else []
    _run([*nice, "cmake", "-S", str(llama_src), "-B", str(build_dir), *row.cmake_flags()], llama_src, log)
    _run([*nice, "cmake", "--build", str(build_dir), "--target", row.target, "-j", "2"], llama_src, log)


def _install(llama_src: Path, build_dir: Path, row: LlamaVersion, target: LlamaBuild) -> None:
    """The server binary (as ``llama-server`` whatever its target was called) and its shared libraries."""
    if target.bin_dir.exists():
        shutil.rmtree(target.bin_dir)
    target.bin_dir.mkdir(parents=True)
    shutil.copy2(build_dir / "bin" / row.target, target.server)
    for item in build_dir.rglob("*.so*"):  # 2024's libllama.so is in src/, later ones in bin/
        if item.is_file() and not (target.bin_dir / item.name).exists():
            shutil.copy2(item, target.bin_dir / item.name, follow_symlinks=True)
    vocab = llama_src / "models" / VOCAB_NAME
    if vocab.is_file():
        shutil.copy2(vocab, target.vocab)


def _version_text(target: LlamaBuild) -> str:
    """The binary's ``--version`` text; a 2024 server that has no ``--version`` must at least print its usage."""
    text = ""
    for flag, expected in (("--version", "version"), ("--help", "usage")):
        result = subprocess.run(
            [str(target.server), flag], env=target.env(), capture_output=True, text=True, timeout=60, check=False
        )
        text = (result.stdout + result.stderr).strip()
        if result.returncode == 0 and expected in text.lower():
            return text if expected == "version" else "(no --version in this build)"
    raise BuildError(f"the built llama-server does not run ({result.returncode}): {text[-500:]}")


def ensure_built(
    version: str = LLAMA_CPP_PYTHON_VERSION, cache_root: Path = CACHE_ROOT, progress: bool = False
) -> LlamaBuild:
    """The cached build of ``version``, built first if absent. Raises ``BuildError`` with what to do."""
    target = LlamaBuild(version, cache_root / version)
    if target.is_complete():
        return target
    target.root.mkdir(parents=True, exist_ok=True)
    with (target.root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_complete():
            return target
        missing = missing_tools()
        if missing:
            raise BuildError(
                f"building llama-server needs {', '.join(missing)}: install the Debian package(s) "
                f"with `apt-get install {' '.join(missing)}` (scripts/setup --test does)"
            )
        log = target.root / "build.log"
        log.write_text("")
        if progress:
            print(f"building llama-server {version} (about 12 CPU-minutes, once); log: {log}", file=sys.stderr)
        started = time.monotonic()
        cpu_before = os.times()
        sdist = _download_sdist(version, target.root / "sdist", log)
        llama_src = _extract_vendor(sdist, target.root / "src")
        build_dir = target.root / "cmake-build"
        row = version_row(version)
        _compile(llama_src, build_dir, row, log)
        _install(llama_src, build_dir, row, target)
        cpu_after = os.times()
        shutil.rmtree(target.root / "src", ignore_errors=True)
        shutil.rmtree(build_dir, ignore_errors=True)
        version_text = _version_text(target)  # after the build tree is gone: its RPATH must not be what runs
        info = {
            "llama_cpp_python": version,
            "version_text": version_text,
            "wall_seconds": round(time.monotonic() - started, 1),
            "cpu_seconds": round(
                cpu_after.children_user
                - cpu_before.children_user
                + cpu_after.children_system
                - cpu_before.children_system,
                1,
            ),
        }
        tmp = target.stamp.with_suffix(".tmp")
        tmp.write_text(json.dumps(info, indent=1))
        tmp.replace(target.stamp)
    return target


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        build = ensure_built(args[0] if args else LLAMA_CPP_PYTHON_VERSION, progress=True)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(build.server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
