#!/usr/bin/python3
"""The size limits of the C/C++ sources: no file over 600 lines, no function over 150.

    /usr/bin/python3 scripts/check-sizes.py [--root DIR]

Reads every C/C++ source (.cpp .h .hpp .c .cc .cu .cuh) under src/, tools/ and python/ of DIR
(default: the repository holding this script), recursively, and prints one line per file or
function over its limit:

    path: N lines (limit 600)
    path:LINE: function NAME is N lines (limit 150)

then exits 1; with none it prints one line starting "check-sizes: OK" and exits 0. A file
whose braces do not balance (after the stripping below) is reported as an error, exit 2.

What counts. A file's length is its number of lines. A function's length is the lines from
the start of its head (the first line of the declaration: `template <...>`, the return type,
attributes) through its closing brace, both included; LINE is that first line. Comments,
string and character literals (raw strings R"x(...)x" too) and preprocessor lines are blanked
first, so that braces inside them count for nothing. A `{` outside any function opens a
function body when the text before it (since the last `;`, `{` or `}` at that level, and
outside parentheses) is a function head: a parameter list `)` optionally followed by
const / volatile / & / && / noexcept(...) / override / final / mutable / an attribute /
`try` / a trailing `-> type`, or by a constructor's initializer list (`: a(x), b{y}`). A
lambda outside any function (`auto f = [](int x) {`, one in a table) is a function too.
Class, struct, union, enum, namespace and extern "C" bodies and brace initializers are not.
Everything inside a function body (its lambdas, local classes, nested blocks) counts toward
that function.

Exemption. Declarative tables (the config field table, the Python module definition: code
that is mostly data, one entry per line) are exempt from the function limit, and only through
an explicit marker comment on the line just before the function's first line:

    // size-limit: table

The script does not check that the function is mostly data; a reviewer does. The marker is
not for long functions of logic: split those.
"""

import argparse
import os
import re
import sys

FILE_LIMIT = 600
FUNCTION_LIMIT = 150
DIRS = ("src", "tools", "python")
EXTENSIONS = (".cpp", ".h", ".hpp", ".c", ".cc", ".cu", ".cuh")
MARKER = "size-limit: table"


class Unbalanced(Exception):
    pass


def strip(text):
    """The text with comments, literals' contents and preprocessor lines replaced by spaces.

    Newlines are kept, so offsets map to the same lines. Quotes of literals are kept (an
    `extern "C"` still reads as one)."""
    out = list(text)
    n = len(text)
    i = 0
    line_start = True  # only whitespace since the last newline (a `#` there is a directive)

    def blank(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if c == "\n":
            line_start = True
            i += 1
            continue
        if c in " \t\r\f\v":
            i += 1
            continue
        if line_start and c == "#":
            # A directive, with its backslash continuations (and any comment in it).
            j = i
            while j < n:
                if text[j] == "\n" and text[j - 1] != "\\":
                    break
                if text.startswith("/*", j):
                    e = text.find("*/", j + 2)
                    j = n if e < 0 else e + 2
                    continue
                j += 1
            blank(i, j)
            i = j
            continue
        line_start = False
        if text.startswith("//", i):
            j = i
            while j < n and not (text[j] == "\n" and text[j - 1] != "\\"):
                j += 1
            blank(i, j)
            i = j
            continue
        if text.startswith("/*", i):
            e = text.find("*/", i + 2)
            j = n if e < 0 else e + 2
            blank(i, j)
            i = j
            continue
        if c == '"':
            # A raw string: R"delim( ... )delim", with an optional u8 / u / U / L prefix.
            m = re.search(r"(?:\bu8|\bu|\bU|\bL|\b)R$", text[max(0, i - 3) : i])
            if m:
                close = text.find("(", i + 1)
                delim = text[i + 1 : close]
                end = text.find(")" + delim + '"', close + 1)
                j = n if end < 0 else end + len(delim) + 1
                blank(i + 1, j)
                i = j + 1
                continue
            j = i + 1
            while j < n and text[j] != '"' and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            blank(i + 1, j)
            i = j + 1
            continue
        if c == "'":
            # A digit separator (1'000'000, 0x1'0) or a character literal ('a', u8'a', L'\n').
            k = i
            while k > 0 and (text[k - 1].isalnum() or text[k - 1] in "_'."):
                k -= 1
            if k < i and text[k].isdigit():
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != "'" and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            blank(i + 1, j)
            i = j + 1
            continue
        i += 1
    return "".join(out)


def word_back(s, j):
    """(start, word) of the identifier ending at s[j], or (j + 1, "") when there is none."""
    k = j
    while k >= 0 and (s[k].isalnum() or s[k] == "_"):
        k -= 1
    w = s[k + 1 : j + 1]
    if not w or w[0].isdigit():
        return j + 1, ""
    return k + 1, w
QUALIFIERS = {"const", "volatile", "noexcept", "override", "final", "mutable", "try", "throw"}
NOT_NAMES = {"decltype", "alignas", "sizeof", "alignof", "noexcept", "__attribute__",
             "static_assert", "__declspec", "throw", "if", "for", "while", "switch", "return",
             "catch"}


def match_back(s, j, open_c, close_c):
    """Index of the `open_c` matching the `close_c` at s[j], or -1."""
    depth = 0
    while j >= 0:
        if s[j] == close_c:
            depth += 1
        elif s[j] == open_c:
            depth -= 1
            if depth == 0:
                return j
        j -= 1
    return -1


def skip_space_back(s, j):
    while j >= 0 and s[j].isspace():
        j -= 1
    return j


def strip_tail(s, j):
    """From s[j] backwards, skips what may follow a parameter list or a lambda's introducer:
    qualifiers, noexcept(...), attributes [[...]], & / &&, and a trailing return type."""
    while True:
        j = skip_space_back(s, j)
        if j < 0:
            return j
        ws, w = word_back(s, j)
        if w in QUALIFIERS:
            j = ws - 1
            continue
        if s[j] == "&":
            j -= 1
            continue
        if s[j] == "]" and j > 0 and s[j - 1] == "]":
            k = match_back(s, j, "[", "]")
            if k > 0 and s[k - 1] == "[":
                j = k - 2
                continue
        if s[j] == ")":
            # noexcept(...) / throw(...) / __attribute__((...)) after the parameter list.
            k = match_back(s, j, "(", ")")
            p = skip_space_back(s, k - 1)
            ws, w = word_back(s, p) if p >= 0 else (0, "")
            if k > 0 and w in ("noexcept", "throw", "__attribute__"):
                j = ws - 1
                continue
        break
    # A trailing return type: "-> type" with no ")" of the parameter list after it.
    arrow = s.rfind("->", 0, j + 1)
    if arrow >= 0 and ")" in s[:arrow] and not re.search(r"[;{}=]", s[arrow:j + 1]):
        before = skip_space_back(s, arrow - 1)
        if before >= 0 and s[before] == ")":
            return strip_tail(s, before)
    return j


def lambda_at(s, j):
    """True when s[:j+1] ends with a lambda's introducer (and parameters): [..] (..) quals."""
    j = strip_tail(s, j)
    if j >= 0 and s[j] == ")":
        k = match_back(s, j, "(", ")")
        if k < 0:
            return False
        j = skip_space_back(s, k - 1)
    if j < 0 or s[j] != "]":
        return False
    k = match_back(s, j, "[", "]")
    if k < 0:
        return False
    p = skip_space_back(s, k - 1)
    # An introducer follows an operator or punctuation, never a name or a subscript.
    return p < 0 or not (s[p].isalnum() or s[p] in "_])" or s[p] == "[")


def function_name(head):
    """The function's (qualified) name in a head, or None when the head is not a function's."""
    h = head.rstrip()
    if not h:
        return None
    j = len(h) - 1
    # A constructor's initializer list: the parameter list is the ")" before a single ":"
    # that is followed by items ending in ")" or "}".
    j = strip_tail(h, j)
    if j < 0:
        return None
    if h[j] == "}" or h[j] == ")":
        init = find_init_colon(h, j)
        if init is not None:
            j = strip_tail(h, skip_space_back(h, init - 1))
    if j < 0 or h[j] != ")":
        return None
    k = match_back(h, j, "(", ")")
    if k < 0:
        return None
    p = skip_space_back(h, k - 1)
    if p < 0:
        return None
    if h[p] == "]" and lambda_at(h, j):
        m = re.search(r"([A-Za-z_]\w*)\s*=\s*\[[^\[\]]*\]\s*$", h[: p + 1])
        return (m.group(1) + " (lambda)") if m else "lambda"
    # operator(), operator<<, operator==, operator new ...
    m = re.search(r"(?<!\w)operator\s*(\(\s*\)|[^\w\s(]+|\s+\w+[\w\s:<>*&]*)?$", h[: p + 1])
    if m:
        start = m.start()
    else:
        start, w = word_back(h, p)
        if not w or w in NOT_NAMES:
            return None
    # Qualifiers: Trainer<T>::step, ns::f, ~X.
    q = start
    while True:
        b = skip_space_back(h, q - 1)
        if b >= 0 and h[b] == "~":
            q = b
            continue
        if b >= 1 and h[b] == ":" and h[b - 1] == ":":
            c = skip_space_back(h, b - 2)
            if c >= 0 and h[c] == ">":
                c = match_back(h, c, "<", ">")
                c = skip_space_back(h, c - 1)
            ws, w = word_back(h, c) if c >= 0 else (0, "")
            if w:
                q = ws
                continue
        break
    name = re.sub(r"\s+", " ", h[q : p + 1])
    if name.split("::")[-1] in NOT_NAMES:
        return None
    return name


def find_init_colon(h, j):
    """Index of the ":" that opens a constructor's initializer list ending at h[j], or None."""
    depth = 0
    i = j
    while i >= 0:
        c = h[i]
        if c in ")}]":
            depth += 1
        elif c in "({[":
            depth -= 1
        elif depth == 0 and c == ":":
            if (i > 0 and h[i - 1] == ":") or (i + 1 < len(h) and h[i + 1] == ":"):
                i -= 2 if h[i - 1] == ":" else 1
                continue
            b = skip_space_back(h, i - 1)
            b = strip_tail(h, b)
            return i if b >= 0 and h[b] == ")" else None
        elif depth == 0 and c in ";=?":
            return None
        i -= 1
    return None


# Heads of bodies that are not functions.
SCOPE_HEAD = re.compile(r"(^|[^\w])(class|struct|union|enum|namespace|extern\s*\"\s*\")(\W|$)")


def find_functions(s):
    """(name, start offset, end offset) of every function body outside functions in `s`."""
    found = []
    n = len(s)
    i = 0
    head_start = 0  # where the current head begins (after the last delimiter)
    # The stack of open braces outside functions: True for an initializer or unknown brace
    # (where "," also ends a head), False for a class / namespace body.
    stack = []
    paren = 0
    while i < n:
        c = s[i]
        if c == "(":
            paren += 1
        elif c == ")":
            paren -= 1
        elif c == ";" and paren == 0:
            head_start = i + 1
        elif c == "," and paren == 0 and stack and stack[-1]:
            head_start = i + 1
        elif c == "}":
            if not stack:
                raise Unbalanced(i)
            stack.pop()
            head_start = i + 1
        elif c == "{":
            # Access labels (public:) start a new head inside a class.
            head = re.sub(r"^\s*(?:(?:public|private|protected)\s*:(?!:)\s*)+", "",
                          s[head_start:i])
            name = None
            if lambda_at(head, len(head) - 1):
                name = function_name(head) or "lambda"
            elif paren == 0:
                name = function_name(head)
            if name is None and (paren > 0 or (re.search(r"\)\s*:[^:]", head)
                                               and word_back(head, len(head.rstrip()) - 1)[1]
                                               and not SCOPE_HEAD.search(head))):
                # A brace inside parentheses (a default argument's initializer), or a member's
                # brace initializer in a constructor's initializer list: part of the head.
                i = match_brace(s, i) + 1
                continue
            if name is not None:
                end = match_brace(s, i)
                start = i - len(head) + (len(head) - len(head.lstrip()))
                found.append((name, start, end))
                i = end + 1
                head_start = i
                continue
            stack.append(not SCOPE_HEAD.search(head))
            head_start = i + 1
        i += 1
    if stack or paren != 0:
        raise Unbalanced(n)
    return found


def match_brace(s, i):
    depth = 0
    n = len(s)
    while i < n:
        if s[i] == "{":
            depth += 1
        elif s[i] == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise Unbalanced(i)


def check_file(path, rel, problems, counts):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    lines = text.split("\n")
    nlines = len(lines) - (1 if text.endswith("\n") else 0)
    if nlines > FILE_LIMIT:
        problems.append((rel, 0, f"{rel}: {nlines} lines (limit {FILE_LIMIT})"))
    s = strip(text)
    try:
        functions = find_functions(s)
    except Unbalanced as e:
        line = s.count("\n", 0, e.args[0]) + 1
        print(f"check-sizes: {rel}:{line}: unbalanced braces (cannot measure)", file=sys.stderr)
        sys.exit(2)
    for name, start, end in functions:
        counts[1] += 1
        first = s.count("\n", 0, start) + 1
        last = s.count("\n", 0, end) + 1
        length = last - first + 1
        if length <= FUNCTION_LIMIT:
            continue
        if first >= 2 and MARKER in lines[first - 2]:
            continue
        problems.append((rel, first,
                         f"{rel}:{first}: function {name} is {length} lines "
                         f"(limit {FUNCTION_LIMIT})"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--root", default=default_root, help="the tree to check (default: %(default)s)")
    args = ap.parse_args()
    problems = []
    counts = [0, 0]  # files, functions
    for d in DIRS:
        top = os.path.join(args.root, d)
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for fn in sorted(filenames):
                if fn.endswith(EXTENSIONS):
                    path = os.path.join(dirpath, fn)
                    counts[0] += 1
                    check_file(path, os.path.relpath(path, args.root), problems, counts)
    problems.sort()
    for _, _, text in problems:
        print(text)
    if problems:
        return 1
    print(f"check-sizes: OK ({counts[0]} files, {counts[1]} functions; limits {FILE_LIMIT} "
          f"lines per file, {FUNCTION_LIMIT} per function)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
