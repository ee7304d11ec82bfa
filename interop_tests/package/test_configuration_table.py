"""docs/configuration.md lists every `KB_*` switch the code reads, and only those.

The switches are found in the sources, not in a list kept beside them: Python reads through
`os.environ` / `os.getenv` / the fuzz harness's `_env_int` / bridge/settings.py's `env_*` readers, rows
of a switch table (`"name": ("KB_...", ...)`, read by its one reader, dsl/tile/switches.py), the
toolkit locator's override table (`bridge.toolkit.OVERRIDES`, whose names are built from the item
names), C/C++ `getenv`, and CMake cache variables, `$ENV{...}`, the override list of `kernelbridge.cmake`
and inputs a CMake file tests before it sets them. Names only a test harness passes to its own children
are listed in INTERNAL.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "configuration.md"

# read by the code, but not a setting anyone sets: the reason is the documentation of the exception
INTERNAL = {"KB_REPRO_TMP": "test_issue12_repros.py hands its temporary directory to its child process"}
# documented before the code that reads it lands (none now)
PENDING: set[str] = set()
# set by a script and known to the doctor, read by nothing (none now: KB_SANITIZER is read by a sanitized test)
SET_NOT_READ: set[str] = set()

_PY_READS = [
    # bridge/settings.py's readers are all named env_*: env_switch, env_choice, env_count, env_list, ...
    re.compile(r"""(?:environ\.get|getenv|environ\.pop|environ\.setdefault|_env_int|\benv_\w+)\(\s*["'](KB_\w+)["']"""),
    re.compile(r"""environ\[\s*["'](KB_\w+)["']\s*\](?!\s*=[^=])"""),
    re.compile(r"""["'](KB_\w+)["']\s+(?:not\s+)?in\s+(?:os\.)?environ\b"""),
    # a row of a switch table whose reader takes the variable from the row (dsl/tile/switches.py's SWITCHES)
    re.compile(r"""^\s*["']\w+["']:\s*\(\s*["'](KB_\w+)["'],""", re.M),
]
_C_READS = re.compile(r"""getenv\(\s*"(KB_\w+)"\s*\)""")
_CMAKE_CACHE = re.compile(r"""set\(\s*(KB_\w+)\s[^)]*\bCACHE\b""")
_CMAKE_OPTION = re.compile(r"""\boption\(\s*(KB_\w+)\s""")
_CMAKE_ENV = re.compile(r"""\$ENV\{(KB_\w+)\}""")
_CMAKE_IF_NOT = re.compile(r"""\bif\(\s*NOT\s+(KB_\w+)\s*\)""")
_CMAKE_PARSE = re.compile(r"""cmake_parse_arguments\(\s*(?:PARSE_ARGV\s+\d+\s+)?KB\s+((?:"[^"]*"\s*){3})""")


# where the project's code lives (shared/, build outputs and virtual environments are not the project's)
SOURCE_ROOTS = ("bridge", "dsl", "cpp", "scripts", "benchmarks", "examples", "interop_tests")


def _tracked(*patterns: str) -> list[Path]:
    """The project's source files matching `patterns`: git's view (new files included), or a plain walk
    of SOURCE_ROOTS when this copy is not a git checkout (the GPU machine gets a copy of the tree)."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *patterns],
                             cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        out = [p.relative_to(REPO).as_posix() for pat in patterns for root in SOURCE_ROOTS
               for p in (REPO / root).rglob(pat)]
        out += [pat.lstrip("*") for pat in patterns if (REPO / pat.lstrip("*")).is_file()]
    keep = [p for p in out if p.split("/", 1)[0] in SOURCE_ROOTS or "/" not in p]
    return sorted({REPO / p for p in keep if (REPO / p).is_file()})


def _cmake_reads(text: str) -> set[str]:
    code = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    names = set(_CMAKE_CACHE.findall(code)) | set(_CMAKE_ENV.findall(code)) | set(_CMAKE_OPTION.findall(code))
    override = re.search(r"set\(KERNELBRIDGE_OVERRIDE_VARS([^)]*)\)", code)
    if override:
        names |= set(override.group(1).split())
    parsed = set()
    for group in _CMAKE_PARSE.findall(code):
        for kw in re.findall(r'"([^"]*)"', group):
            parsed |= {f"KB_{k}" for k in kw.split(";") if k} | {"KB_UNPARSED_ARGUMENTS"}
    for m in _CMAKE_IF_NOT.finditer(code):       # an input: tested before this file mentions it
        name = m.group(1)
        if name not in parsed and name not in code[: m.start()]:
            names.add(name)
    return names


def switches_in_source() -> dict[str, set[str]]:
    """KB_* name -> the files (relative paths) that read it."""
    found: dict[str, set[str]] = {}

    def add(name: str, path: Path) -> None:
        found.setdefault(name, set()).add(path.relative_to(REPO).as_posix())

    for path in _tracked("*.py"):
        text = path.read_text(encoding="utf-8", errors="replace")
        for rx in _PY_READS:
            for name in rx.findall(text):
                add(name, path)
    for path in _tracked("*.cpp", "*.hpp", "*.h", "*.cu", "*.cuh", "*.cc"):
        for name in _C_READS.findall(path.read_text(encoding="utf-8", errors="replace")):
            add(name, path)
    for path in _tracked("*.cmake", "*CMakeLists.txt", "*.cmake.in"):
        for name in _cmake_reads(path.read_text(encoding="utf-8", errors="replace")):
            add(name, path)
    from bridge import toolkit
    for name in toolkit.OVERRIDES.values():
        add(name, REPO / "bridge" / "toolkit.py")
    return found


def documented() -> dict[str, list[str]]:
    """KB_* name -> the row's cells (meaning, default, where read), from every table of the page."""
    rows: dict[str, list[str]] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\|\s*`(KB_\w+)`\s*\|(.*)\|\s*$", line)
        if m:
            assert m.group(1) not in rows, f"{m.group(1)} has two rows in docs/configuration.md"
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return rows


@pytest.fixture(scope="module")
def source() -> dict[str, set[str]]:
    return switches_in_source()


def test_the_scanner_finds_reads_of_every_kind(source):
    """Guards the scanner itself: one known read per source kind."""
    assert "dsl/cache.py" in source["KB_CACHE"]                 # os.environ.get
    assert "dsl/runmode.py" in source["KB_SIMULATE"]
    assert "dsl/compiler.py" in source["KB_DUMP"]               # a bridge/settings.py env_* reader
    assert "bridge/toolkit.py" in source["KB_NVCC"]             # the locator's override table
    assert "cpp/cmake/kernelbridge.cmake" in source["KB_LIBDEVICE"]   # the CMake override list
    assert "CMakeLists.txt" in source["KB_CUDA_ARCHS"]          # a CACHE variable
    assert "CMakeLists.txt" in source["KB_JAX_FFI_INCLUDE"]     # an input tested before it is set
    assert "interop_tests/fuzz/harness.py" in source["KB_FUZZ_RSS_MB"]   # _env_int
    for not_a_switch in ("KB_ARCHS", "KB_SOURCES", "KB_UNPARSED_ARGUMENTS", "KB_CUDA_H", "KB_ROOT",
                         "KB_CONTRACT", "KB_ARRAY"):
        assert not_a_switch not in source, f"{not_a_switch} is not a switch: {source.get(not_a_switch)}"


def test_every_switch_the_code_reads_is_in_the_table(source):
    rows = documented()
    missing = {n: sorted(paths) for n, paths in source.items() if n not in rows and n not in INTERNAL}
    assert not missing, f"KB_* switches read by the code but not in docs/configuration.md: {missing}"


def test_the_table_lists_no_dead_switch(source):
    dead = sorted(n for n in documented() if n not in source and n not in PENDING)
    assert not dead, f"docs/configuration.md documents switches nothing reads: {dead}"
    assert not set(INTERNAL) & set(documented()), "an internal name is documented as a switch"


def test_each_row_has_a_meaning_a_default_and_true_read_locations(source):
    for name, cells in documented().items():
        assert len(cells) == 3 and all(cells), f"{name}: row needs meaning, default, where read: {cells}"
        if name in PENDING:
            continue
        cited = set(re.findall(r"`([\w./-]+\.(?:py|cmake|txt|cpp|hpp))`", cells[2]))
        assert cited, f"{name}: 'where read' names no file: {cells[2]!r}"
        for path in cited:
            assert (REPO / path).is_file(), f"{name}: 'where read' cites {path}, which does not exist"
        assert cited & source[name], f"{name}: read in {sorted(source[name])}, the table says {sorted(cited)}"


def test_the_doctor_knows_exactly_the_environment_switches():
    """The doctor calls an unknown KB_* variable a typo, so it must know every environment switch (the
    CMake cache variables are not read from the environment)."""
    from bridge.doctor import SETTINGS
    text = DOC.read_text(encoding="utf-8")
    cmake_part = text.split("## Building the package", 1)[1].split("\n## ", 1)[0]
    cmake_only = set(re.findall(r"^\|\s*`(KB_\w+)`", cmake_part, re.M))
    assert cmake_only == {"KB_CUDA_ARCHS", "KB_JAX_FFI_INCLUDE", "KB_LAUNCH_PHASES"}
    assert set(SETTINGS) == (set(documented()) - cmake_only) | SET_NOT_READ
