#!/usr/bin/env python3
"""Writes python/pldr.pyi, the type stub of the `pldr` module, from the built module itself.

Every public class, method, property and function comes with pybind11's signature line and its
docstring; a `**kwargs` of an option set (Model, generate, score, train) becomes its keywords,
read from the docstring's "Keyword arguments" list, which python/options_py.h writes from the
option tables of include/pldr/options.h. So the stub cannot drift from the module: the
python_tests check (test_stub.py) regenerates it and compares.

usage: PYTHONPATH=build/python /usr/bin/python3 scripts/gen-pyi.py [--check] [OUT]
"""
import inspect
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

# pybind11's spelling of a type in a signature → the stub's.
TYPES = [(r"\bpldr\.", ""), (r"\bobject\b", "Any"), (r"\bnumpy\.ndarray\b", "numpy.ndarray"),
         (r"\bList\[", "list["), (r"\bDict\[", "dict["), (r"\bTuple\[", "tuple["),
         (r"\bCallable\b", "Callable")]
PATHS = "str | os.PathLike[str]"
IDS = "Sequence[int] | numpy.ndarray"
# Arguments the module takes as `object` and reads itself (pldr_module.cpp), by name.
ARGS = {"ids": IDS, "batch": IDS, "prompt": "str | " + IDS, "context": "str | " + IDS,
        "continuation": "str | " + IDS, "callback": "Callable[..., Any] | None",
        "path": PATHS, "out_dir": PATHS + " | None"}


def stub_type(t):
    for a, b in TYPES:
        t = re.sub(a, b, t)
    return t


def option_type(name, default):
    """The type of an option keyword from its documented default (options_py.h's reader)."""
    if default in ("True", "False"):
        return "bool"
    if default.startswith("("):
        return "tuple[float, float, float]"
    if default == "[]":
        return "str | list[str]"
    if default.startswith("'"):
        if name == "dtype":
            return "str | numpy.dtype[Any] | type"
        if name.endswith(("_dir", "_path", "_file")) or name == "tokenizer":
            return PATHS
        return "str"
    return "int" if re.fullmatch(r"-?\d+", default) else "float"


def options_of(doc):
    """(name, type) of each keyword listed under "Keyword arguments" in a docstring."""
    if "Keyword arguments" not in doc:
        return []
    out = []
    for line in doc.split("Keyword arguments", 1)[1].splitlines():
        m = re.match(r"    (\w+)=(.*?): ", line)
        if m:
            out.append((m.group(1), option_type(m.group(1), m.group(2))))
    return out


def split_params(s):
    """Splits a pybind11 parameter list at top-level commas."""
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def stub_params(params, doc, method):
    """The stub's parameter list: pybind11's, with defaults as `...`, `self` untyped and an
    option set's **kwargs replaced by its keywords."""
    out, kw_only = [], False
    for i, p in enumerate(split_params(params)):
        if p == "*":
            kw_only = True
            out.append(p)
            continue
        if p == "**kwargs":
            opts = options_of(doc)
            if opts and not kw_only:
                out.append("*")
            out += [f"{n}: {t} = ..." for n, t in opts]
            if not opts:
                out.append("**kwargs: Any")
            continue
        name, _, rest = p.partition(":")
        if method and i == 0:
            out.append("self")
            continue
        typ, _, default = rest.partition("=")
        typ = ARGS.get(name.strip(), stub_type(typ.strip()))
        out.append(f"{name.strip()}: {typ}" + (" = ..." if default else ""))
    return ", ".join(out)


def doc_block(text, indent):
    text = text.strip()
    if not text:
        return ""
    text = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    lines = text.splitlines()
    body = "\n".join((indent + l) if l.strip() else "" for l in lines[1:])
    return f'{indent}"""{lines[0]}' + ("\n" + body + "\n" + indent if body else "") + '"""\n'


def routine(name, obj, indent, method):
    doc = obj.__doc__ or ""
    first, _, rest = doc.partition("\n")
    m = re.match(r"\s*(\w+)\((.*)\)\s*->\s*(.*)$", first)
    if not m:
        raise SystemExit(f"gen-pyi: no pybind11 signature for {name}: {first!r}")
    sig = stub_params(m.group(2), rest, method)
    ret = stub_type(m.group(3).strip())
    text = rest.strip()
    body = ("\n" + doc_block(text, indent + "    ") + indent + "    ...\n") if text else " ...\n"
    return f"{indent}def {name}({sig}) -> {ret}:{body}"


def prop(name, obj, indent):
    doc = obj.fget.__doc__ or ""
    first, _, rest = doc.partition("\n")
    m = re.match(r"\s*\w*\((.*)\)\s*->\s*(.*)$", first)
    ret = stub_type(m.group(2).strip()) if m else "Any"
    text = rest.strip() or (obj.__doc__ or "").strip()
    if text == doc.strip():
        text = ""
    body = ("\n" + doc_block(text, indent + "    ") + indent + "    ...\n") if text else " ...\n"
    return f"{indent}@property\n{indent}def {name}(self) -> {ret}:{body}"


def generate(mod):
    out = ['"""' + mod.__doc__ + '\n\nGenerated by scripts/gen-pyi.py from the built module; do not '
           'edit."""\n', "import os\nfrom typing import Any, Callable, Sequence\n\nimport numpy\n\n",
           "__version__: str\n\n"]
    names = sorted(n for n in dir(mod) if not n.startswith("_"))
    excs = [n for n in names if isinstance(getattr(mod, n), type)
            and issubclass(getattr(mod, n), BaseException)]
    # Base classes first (Error before ArgumentError).
    excs.sort(key=lambda n: len(getattr(mod, n).__mro__))
    for n in excs:
        cls = getattr(mod, n)
        bases = ", ".join(b.__name__ for b in cls.__bases__)
        out.append(f"\nclass {n}({bases}):\n" + (doc_block(cls.__doc__ or "", "    ") or "")
                   + "    ...\n")
    for n in names:
        obj = getattr(mod, n)
        if n in excs or not isinstance(obj, type):
            continue
        out.append(f"\nclass {n}:\n" + doc_block(obj.__doc__ or "", "    "))
        for an, attr in sorted(vars(obj).items()):
            if an.startswith("_") and an not in ("__init__", "__len__"):
                continue
            if isinstance(attr, property):
                out.append("\n" + prop(an, attr, "    "))
            elif callable(attr) and (attr.__doc__ or "").startswith(an + "("):
                out.append("\n" + routine(an, attr, "    ", True))  # not pybind11's default
    for n in names:
        obj = getattr(mod, n)
        if callable(obj) and not isinstance(obj, type):
            out.append("\n\n" + routine(n, obj, "", False))
    return "".join(out).rstrip("\n") + "\n"


def main():
    args = [a for a in sys.argv[1:] if a != "--check"]
    path = args[0] if args else os.path.join(ROOT, "python", "pldr.pyi")
    import pldr
    text = generate(pldr)
    if "--check" in sys.argv:
        with open(path) as f:
            if f.read() != text:
                sys.exit(f"gen-pyi: {path} is stale; run scripts/gen-pyi.py")
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    print(f"gen-pyi: wrote {path}")


if __name__ == "__main__":
    main()
