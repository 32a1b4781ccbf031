"""Assemble what the images carry, inside their build stage (Debian's python3, stdlib only).

    assemble.py site CTX OUT      secureml's runtime for a step image: OUT/site (the runtime's
                                  Python packages and kfp, for dist-packages) and OUT/shim
    assemble.py payload CTX OUT   the platform runtime image's payload (RUNTIME_PAYLOAD_DIR):
                                  a self-contained interpreter, the launcher, the shim, `install`

CTX is the build context `secureml.images.context` stages: `src/` (secureml's runtime
sources), `wheels/` and `requirements.txt` (pinned), and `images/` (this folder). docs/images.md
describes both layouts. The payload depends on nothing of the step image: its interpreter's ELF
interpreter and RPATH name the payload's own loader and libraries, every library any of its ELF
files needs is copied beside them, and the entry `bin/secureml-launch` is static.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

PY = f"python{sys.version_info.major}.{sys.version_info.minor}"
STDLIB = Path(sysconfig.get_paths()["stdlib"])
# Parts of the standard library a launcher never imports; leaving them out halves the payload.
STDLIB_SKIP = {
    "test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
    "pydoc_data",
    "__pycache__",
    "site-packages",
    "dist-packages",
    "distutils",
    "unittest",
    "venv",
    "curses",
    "dbm",
    "sqlite3",
    "xmlrpc",
    "wsgiref",
    "turtle.py",
}
# Extension modules of the standard library no launcher stage loads (an import trace of every
# stage, docs/performance.md); leaving them out also leaves out the libraries only they need
# (readline, ncurses, sqlite, Berkeley DB, NIS, Kerberos).
DYNLOAD_SKIP = ("_test", "_ctypes_test", "xx", "_curses", "_dbm", "_sqlite3", "readline", "nis",
                "ossaudiodev", "audioop", "_crypt", "_lsprof")  # fmt: skip
STDLIB_ZIP = f"python{sys.version_info.major}{sys.version_info.minor}.zip"  # CPython's sys.path[0]
# Distributions the launcher's dependencies declare but no launcher stage imports (the import
# trace again): command-line front ends (click, rich, pygments, markdown-it) and build-time or
# optional helpers (cffi's compiler, e-mail validation).
UNUSED_DISTRIBUTIONS = {
    "click": ("click",),
    "rich": ("rich",),
    "pygments": ("pygments",),
    "markdown_it_py": ("markdown_it",),
    "mdurl": ("mdurl",),
    "cffi": ("cffi",),
    "pycparser": ("pycparser",),
    "email_validator": ("email_validator",),
    "dnspython": ("dns",),
}
# Top-level entries of dist-packages that stay files: extension modules cannot load from a zip,
# certifi hands its CA file out by path, secureml finds the shim and its sources by __file__.
SITE_FILES = ("secureml", "certifi")
SITE_ZIP = "site.zip"
LOADER = "ld-linux-x86-64.so.2"
SHIM = "libsecureml_shim.so"


def run(*cmd: str | Path) -> str:
    return subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True).stdout


def pip_target(ctx: Path, target: Path) -> None:
    """Install the pinned requirements from the context's wheels only (no index)."""
    run(
        sys.executable,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-index",
        "--no-compile",
        "--break-system-packages",
        "--find-links",
        ctx / "wheels",
        "--target",
        target,
        "-r",
        ctx / "requirements.txt",
    )
    for cache in target.rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)
    shutil.copytree(ctx / "src" / "secureml", target / "secureml", dirs_exist_ok=True)


def build_shim(ctx: Path, out: Path) -> Path:
    """Compile the shim here with the package's own build (its flags), against this stage's glibc;
    the glibc it needs at least is recorded."""
    shim_control = ctx / "src" / "secureml" / "enforcement" / "shim_control.py"
    run(sys.executable, shim_control, "build", out)
    return out / SHIM


def min_glibc(library: Path) -> str:
    """The newest GLIBC_x.y symbol version the library needs: the oldest glibc it loads with."""
    versions = set(
        re.findall(r"GLIBC_([0-9]+\.[0-9]+(?:\.[0-9]+)?)", run("objdump", "-T", library))
    )
    return max(versions, key=lambda v: tuple(int(p) for p in v.split("."))) if versions else "any"


def site(ctx: Path, out: Path) -> None:
    pip_target(ctx, out / "site")
    shim = build_shim(ctx, out / "shim")
    shutil.copy2(shim, out / "site" / "secureml" / "enforcement" / SHIM)
    (out / "shim" / "min-glibc").write_text(min_glibc(shim) + "\n")


def copy_stdlib(dest: Path) -> None:
    """The standard library without its tests and tools, and without links out of it (Debian's
    sitecustomize.py links to /etc, which in a pod is the step image's)."""
    for source in STDLIB.rglob("*"):
        relative = source.relative_to(STDLIB)
        if STDLIB_SKIP.intersection(relative.parts) or relative.parts[0].startswith("config-"):
            continue
        target = dest / relative
        if source.is_symlink():
            resolved = source.resolve()
            if not resolved.is_relative_to(STDLIB) or not resolved.is_file():
                continue
            source = resolved
        if source.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def zip_stdlib(lib: Path) -> None:
    """The standard library as bytecode in CPython's own `lib/pythonXY.zip` (the first entry of
    `sys.path`, and the landmark that sets the prefix), its extension modules as files in
    `lib/pythonX.Y/lib-dynload` (a zip cannot hold them)."""
    staging = lib / "stdlib"
    copy_stdlib(staging)
    dynload = lib / PY / "lib-dynload"
    dynload.mkdir(parents=True)
    for module in sorted((staging / "lib-dynload").iterdir()):
        if not module.name.startswith(DYNLOAD_SKIP):
            shutil.copy2(module, dynload / module.name)
    shutil.rmtree(staging / "lib-dynload")
    compile_sourceless(staging)
    write_zip(staging, lib / STDLIB_ZIP)
    shutil.rmtree(staging)


def compile_sourceless(folder: Path) -> None:
    """Every module as `name.pyc` beside where its source was, the source removed: bytecode the
    import system loads without a source (never checked against one) and no second copy."""
    run(sys.executable, "-m", "compileall", "-q", "-b", "-j0",
        "--invalidation-mode", "unchecked-hash", folder)  # fmt: skip
    for source in folder.rglob("*.py"):
        if source.with_suffix(".pyc").is_file():
            source.unlink()


def write_zip(folder: Path, archive: Path) -> None:
    """`folder` into `archive`, stored (no decompression at import), in a stable order; folders
    have entries too (zipimport finds a namespace package, one without __init__, by its entry)."""
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as out:
        for path in sorted(folder.rglob("*")):
            out.write(path, path.relative_to(folder).as_posix())


def pack_site(site: Path) -> None:
    """The launcher's packages, smaller: no distribution no stage imports, no console scripts,
    caches, stubs or C sources; extension modules stripped of symbols; bytecode only; every
    top-level package without an extension module in `site.zip` (on `sys.path` through a .pth
    file). Each kept distribution's dist-info stays a folder (what an SBOM reads), less RECORD,
    whose file list no longer holds."""
    for distribution, packages in UNUSED_DISTRIBUTIONS.items():
        for name in packages:
            shutil.rmtree(site / name)
        for info in site.glob("*.dist-info"):
            if info.name.split("-")[0].lower() == distribution.lower():
                shutil.rmtree(info)
    shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts
    (site / "example.py").unlink(missing_ok=True)  # nvidia-ml-py's sample, not a module
    for path in sorted(site.rglob("*"), reverse=True):
        if path.name == "__pycache__":
            shutil.rmtree(path)
        elif path.suffix in (".pyi", ".pxd", ".pyx", ".h", ".c") or path.name == "RECORD":
            path.unlink()
        elif path.suffix == ".so" and path.is_file() and path.name != SHIM:
            run("strip", "--strip-unneeded", path)
    compile_sourceless(site)
    packed = site / "packed"
    for entry in sorted(site.iterdir()):
        if entry.name.endswith(".dist-info") or entry.name in SITE_FILES:
            continue
        if entry.is_dir() and any(is_elf(f) for f in entry.rglob("*") if f.is_file()):
            continue
        if entry.is_file() and is_elf(entry):
            continue
        packed.mkdir(exist_ok=True)
        shutil.move(entry, packed / entry.name)
    write_zip(packed, site / SITE_ZIP)
    shutil.rmtree(packed)
    (site / "secureml-runtime.pth").write_text(SITE_ZIP + "\n")


def needed_libraries(elf: Path) -> dict[str, Path]:
    """soname → file of every library `elf` loads, resolved the way this stage's loader does."""
    found: dict[str, Path] = {}
    for line in run("ldd", elf).splitlines():
        match = re.match(r"\s*(\S+) => (/\S+) \(", line)
        if match:
            found[match.group(1)] = Path(match.group(2))
    return found


def is_elf(path: Path) -> bool:
    with path.open("rb") as handle:
        return handle.read(4) == b"\x7fELF"


def payload(ctx: Path, out: Path, runtime_dir: str) -> None:
    python = out / "python"
    lib = out / "lib"
    for folder in (out / "bin", lib, python / "bin"):
        folder.mkdir(parents=True, exist_ok=True)
    zip_stdlib(python / "lib")
    # Debian's site.py puts <prefix>/lib/python3/dist-packages on sys.path.
    site_dir = python / "lib" / "python3" / "dist-packages"
    pip_target(ctx, site_dir)
    interpreter = python / "bin" / "python3"
    shutil.copy2(Path(sys.executable).resolve(), interpreter)
    shim = build_shim(ctx, lib)
    shutil.copy2(shim, site_dir / "secureml" / "enforcement")
    pack_site(site_dir)

    # Every library an ELF file of the payload needs (the shim excepted: it runs inside the step's
    # processes, on the step's libc), from this stage, beside the loader.
    libraries: dict[str, Path] = {}
    for path in sorted(out.rglob("*")):
        if path.is_file() and not path.is_symlink() and path != shim and is_elf(path):
            for soname, resolved in needed_libraries(path).items():
                if not resolved.resolve().is_relative_to(out.resolve()):
                    libraries[soname] = resolved
    for soname, resolved in sorted(libraries.items()):
        shutil.copy2(resolved.resolve(), lib / soname)
    shutil.copy2(Path("/lib64", LOADER).resolve(), lib / LOADER)
    run(
        "patchelf",
        "--set-interpreter",
        f"{runtime_dir}/lib/{LOADER}",
        "--force-rpath",
        "--set-rpath",
        f"{runtime_dir}/lib",
        interpreter,
    )

    # OPENSSL_CONF of the launcher (launch.c): OpenSSL's defaults, not the step image's
    # /usr/lib/ssl/openssl.cnf, which could name a provider module of the image's.
    (out / "etc").mkdir(exist_ok=True)
    (out / "etc" / "openssl.cnf").write_text(
        "# secureml's launcher: OpenSSL's built-in defaults, no provider or engine modules\n"
    )

    sources = ctx / "images" / "runtime-injector"
    static = ("gcc", "-static", "-O2", "-s", "-Wall", "-Wextra", "-Werror")
    run(*static, f'-DRUNTIME_DIR="{runtime_dir}"', "-o", out / "bin" / "secureml-launch",
        sources / "launch.c")  # fmt: skip
    run(*static, "-o", out / "install", sources / "install.c")

    manifest = {
        "secureml": (ctx / "VERSION").read_text().strip(),
        "python": ".".join(map(str, sys.version_info[:3])),
        "runtime_dir": runtime_dir,
        "launcher": f"{runtime_dir}/bin/secureml-launch",
        "shim": f"{runtime_dir}/lib/{SHIM}",
        "shim_min_glibc": min_glibc(shim),
        "libraries": sorted(libraries),
        # what `install` copies (the manifest aside): the runtime volume's sizeLimit must hold it
        "files": sum(1 for p in out.rglob("*") if p.is_file()),
        "bytes": sum(p.stat().st_size for p in out.rglob("*") if p.is_file()),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] not in ("site", "payload"):
        print(__doc__, file=sys.stderr)
        return 64
    ctx, out = Path(argv[1]), Path(argv[2])
    if argv[0] == "site":
        site(ctx, out)
    else:
        payload(ctx, out, os.environ.get("RUNTIME_DIR", "/opt/secureml"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
