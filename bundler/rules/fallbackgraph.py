"""Graph algorithms over provider fallback edges, for the fallback warnings of 01 §5.

Pure and iterative: a fallback chain in a hostile config may be longer than Python's stack.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

__all__ = ["shortest_depths", "strong_components"]


def shortest_depths(edges: Mapping[str, list[str]], roots: Iterable[str]) -> dict[str, int]:
    depth: dict[str, int] = {}
    frontier = [root for root in dict.fromkeys(roots) if root in edges]
    for root in frontier:
        depth[root] = 0
    while frontier:
        following: list[str] = []
        for node in frontier:
            for target in edges[node]:
                if target not in depth:
                    depth[target] = depth[node] + 1
                    following.append(target)
        frontier = following
    return depth


def strong_components(edges: Mapping[str, list[str]]) -> dict[str, int]:
    """Tarjan's algorithm, iterative (a fallback chain may be longer than Python's stack)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    component: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    counter = 0
    for start in edges:
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(edges[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            advanced = False
            for target in targets:
                if target not in index:
                    index[target] = low[target] = counter
                    counter += 1
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(edges[target])))
                    advanced = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component[member] = index[node]
                    if member == node:
                        break
    return component
