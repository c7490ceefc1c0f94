"""The llama-server build script's contract: a machine without the compiler gets an error naming the
Debian packages to install, before anything is downloaded; a cached build is found without building."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spyglass.engine.llama.build import BuildError, LlamaBuild, ensure_built, missing_tools


def test_a_machine_without_the_toolchain_is_told_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # nothing on it: as a fresh machine without cmake, g++, make
    assert missing_tools() == ["cmake", "g++", "make"]
    with pytest.raises(BuildError, match=r"apt-get install cmake g\+\+ make"):
        ensure_built("0.3.36", tmp_path / "cache")
    assert not (tmp_path / "cache" / "0.3.36" / "sdist").exists()  # nothing downloaded


def test_a_complete_cached_build_is_returned_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "cache" / "9.9.9"
    (root / "bin").mkdir(parents=True)
    for part in ("bin/llama-server", "ggml-vocab-llama-spm.gguf"):
        (root / part).write_text("x")
    (root / "BUILT").write_text(json.dumps({"llama_cpp_python": "9.9.9", "cpu_seconds": 1.0}))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no toolchain needed for a cached build
    build = ensure_built("9.9.9", tmp_path / "cache")
    assert build == LlamaBuild("9.9.9", root) and build.info()["cpu_seconds"] == 1.0
    assert build.env({"LD_LIBRARY_PATH": "/x"})["LD_LIBRARY_PATH"] == f"{root / 'bin'}:/x"


def test_a_build_without_its_stamp_is_not_taken_for_a_finished_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "cache" / "9.9.9"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "llama-server").write_text("half")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(BuildError):  # it would be rebuilt: here, without a toolchain, it says so
        ensure_built("9.9.9", tmp_path / "cache")


def test_a_2024_build_installs_its_server_target_under_the_one_name(tmp_path: Path) -> None:
    """0.2.56's server is the example target `server` (LLAMA_BUILD_EXAMPLES=ON, LLAMA_NATIVE): installed as
    bin/llama-server, so the recorder and the stack run every build alike; its sdist has no vocabulary."""
    from spyglass.engine.llama.build import _install
    from spyglass.engine.llama.versions import PINNED, version

    row = version("0.2.56")
    assert row.target == "server" and "-DLLAMA_BUILD_EXAMPLES=ON" in row.cmake_flags()
    assert "-DLLAMA_BUILD_EXAMPLES=OFF" in version(PINNED).cmake_flags() and version(PINNED).target == "llama-server"
    (tmp_path / "build" / "bin").mkdir(parents=True)
    for name in ("server", "libggml.so", "quantize"):
        (tmp_path / "build" / "bin" / name).write_text(name)
    target = LlamaBuild("0.2.56", tmp_path / "cache")
    _install(tmp_path / "src", tmp_path / "build", row, target)
    assert sorted(p.name for p in target.bin_dir.iterdir()) == ["libggml.so", "llama-server"]
    assert target.server.read_text() == "server" and not target.vocab.exists()


def test_the_recorder_runs_each_build_in_the_logging_modes_it_has(tmp_path: Path) -> None:
    from spyglass.engine.llama.record import modes, server_argv
    from spyglass.engine.llama.versions import PINNED, version

    assert [m.name for m in modes(version("0.2.56"))] == ["default", "text", "verbose"]
    assert [m.name for m in modes(version("0.3.1"))] == ["default", "prefix", "verbose"]
    pinned = {m.name: m for m in modes(version(PINNED))}
    assert list(pinned) == ["default", "prefix", "verbose", "router", "router-two"]
    assert pinned["router-two"].router and pinned["router-two"].models == 2
    build, model = LlamaBuild(PINNED, tmp_path), tmp_path / "m" / "tiny.gguf"
    argv = server_argv(build, version(PINNED), pinned["prefix"], model, 8081, tmp_path / "x.log", "--slots, --no-slots")
    assert argv[argv.index("--cache-ram") + 1] == "1" and "--slots" in argv
    assert argv[-3:] == ["--log-timestamps", "--log-file", str(tmp_path / "x.log")]
    router = server_argv(build, version(PINNED), pinned["router"], model, 8081, tmp_path / "x.log", "")
    assert router[1:3] == ["--models-dir", str(model.parent)] and "-m" not in router and "--log-file" not in router
    old = server_argv(
        build,
        version("0.2.56"),
        modes(version("0.2.56"))[1],
        model,
        8081,
        tmp_path / "x.log",
        "--slots-endpoint-disable",
    )
    assert "--cache-ram" not in old and "--slots" not in old and old[-2:] == ["--log-format", "text"]
