# python/pldr.pyi is generated from the built module (scripts/gen-pyi.py): the checked-in stub
# must equal a fresh one, so it cannot drift from the bindings or the option tables; and every
# public name of the module has a docstring.
import os
import re
import subprocess
import sys

from conftest import ROOT


def test_stub_is_current(tmp_path):
    out = tmp_path / "pldr.pyi"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen-pyi.py"), str(out)],
                       capture_output=True, text=True, env=os.environ)
    assert r.returncode == 0, r.stderr
    with open(os.path.join(ROOT, "python", "pldr.pyi")) as f:
        checked_in = f.read()
    assert out.read_text() == checked_in, "python/pldr.pyi is stale: run scripts/gen-pyi.py"
    compile(checked_in, "pldr.pyi", "exec")  # valid Python
    # The option tables reach the stub: a keyword of each set, with its type.
    for line in ("temperature: float = ...", "init_dir: str | os.PathLike[str] = ...",
                 "mode: str = ...", "map_file: bool = ..."):
        assert line in checked_in, line


def test_every_public_name_has_a_docstring(pldr):
    missing = []
    for name in dir(pldr):
        if name.startswith("_"):
            continue
        obj = getattr(pldr, name)
        if not (obj.__doc__ or "").strip():
            missing.append(name)
        if isinstance(obj, type) and not issubclass(obj, BaseException):
            for an, attr in vars(obj).items():
                if an.startswith("_") and an not in ("__init__", "__len__"):
                    continue
                doc = attr.__doc__ or ""
                # pybind11 puts the signature first: a docstring is what follows it.
                text = re.sub(r"^\w*\(.*\) -> .*\n?", "", doc)
                if callable(attr) or isinstance(attr, property):
                    if not text.strip() and "Initialize self" not in doc:
                        missing.append(f"{name}.{an}")
    assert not missing, missing
