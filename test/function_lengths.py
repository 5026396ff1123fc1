#!/usr/bin/env python3
"""No function of compiler/, runtime/ or tools/ is longer than 120 lines, so that each one
can be read on a screen or two: a function that grows past that is split where it holds
several steps. Lines run from the signature's first line to the closing brace; strings
and comments are blanked first, so their braces do not count.

Prints every function over the limit and exits 1; otherwise prints the longest few."""
import pathlib
import re
import sys

LIMIT = 120
FOLDERS = ("compiler", "runtime", "tools")
CONTROL = re.compile(r"^(if|for|while|switch|else|do|case|return|catch|try|\})\b")
# What a lambda's body follows: its captures, parameters, specifiers and return type.
LAMBDA = re.compile(r"\]\s*(\([^()]*(\([^()]*\)[^()]*)*\))?\s*(mutable)?\s*(->[^{]*)?$")


def blank(text):
    """The source with comments, strings and character literals emptied."""
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r'R"\((?:.|\n)*?\)"', lambda m: '""' + "\n" * m.group(0).count("\n"), text)
    text = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)
    return re.sub(r"'(?:\\.|[^'\\\n])'", "''", text)


def functions(path):
    """(lines, first line, signature) of each function body in `path` (the outermost
    braces that follow a parameter list; a lambda's or a control statement's are
    inside it)."""
    lines = blank(path.read_text(errors="replace")).split("\n")
    stack = []
    for i, line in enumerate(lines):
        text = line.strip()
        for at, ch in enumerate(line):
            if ch == "{":
                before = line[:at].rstrip()
                # A body's brace ends its line and follows a parameter list (and maybe
                # const, override, noexcept or an initialiser list's last member).
                opens = (line[at + 1:].strip() == "" and ")" in before
                         and not CONTROL.match(text) and not LAMBDA.search(before))
                inside = any(kind == "function" for kind, _ in stack)
                stack.append(("function" if opens and not inside else "block", i))
            elif ch == "}" and stack:
                kind, start = stack.pop()
                if kind != "function":
                    continue
                first = start  # back to the signature's first line
                while first > 0:
                    above = lines[first - 1].strip()
                    if not above or above.endswith((";", "}", "{", ":")) or above.startswith("#"):
                        break
                    first -= 1
                yield i - first + 1, first + 1, lines[first].strip()[:70]


root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent)
found = []
for folder in FOLDERS:
    for path in sorted((root / folder).rglob("*")):
        if path.suffix in (".cpp", ".cu", ".cuh", ".h"):
            for length, line, signature in functions(path):
                found.append((length, f"{path.relative_to(root)}:{line}", signature))
found.sort(reverse=True)
over = [f for f in found if f[0] > LIMIT]
for length, where, signature in over:
    print(f"{where}: {length} lines (more than {LIMIT}): {signature}")
if over:
    sys.exit(1)
print(f"{len(found)} functions in {', '.join(FOLDERS)}, none over {LIMIT} lines; the longest:")
for length, where, signature in found[:5]:
    print(f"  {length:4d}  {where}  {signature}")
