#!/usr/bin/env python3
"""Lists file-level import cycles inside each crate: module A uses `crate::b` and module B
(transitively) uses `crate::a`. Exits 1 when there is one. Tests (`mod tests`) are skipped.

    scripts/module_cycles.py [crates/...]
"""
import re
import sys
from pathlib import Path


def module_of(src: Path, file: Path) -> str:
    rel = file.relative_to(src).with_suffix("")
    parts = [p for p in rel.parts if p not in ("mod", "lib", "main")]
    return parts[0] if parts else "lib"


def edges(src: Path) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for file in src.rglob("*.rs"):
        me = module_of(src, file)
        text = file.read_text()
        text = text.split("#[cfg(test)]")[0]
        deps = graph.setdefault(me, set())
        for m in re.finditer(r"crate::(\{[^;]*\}|\w+)", text):
            names = re.findall(r"(?:^|[{,]\s*)(\w+)", m.group(1)) if m.group(1).startswith("{") else [m.group(1)]
            for n in names:
                is_module = (src / f"{n}.rs").exists() or (src / n / "mod.rs").exists()
                if n != me and is_module:
                    deps.add(n)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def main() -> None:
    roots = [Path(a) for a in sys.argv[1:]] or sorted(Path("crates").iterdir())
    found = False
    for root in roots:
        src = root / "src"
        if not src.is_dir():
            continue
        for comp in cycles(edges(src)):
            found = True
            print(f"{root.name}: {' <-> '.join(comp)}")
    if not found:
        print("no import cycle between files of a crate")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    sys.setrecursionlimit(10000)
    main()
