"""Turning the repetitions into one table (medians, min–max, ratios) and the docs section."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from benchlib.systems import BY_KEY, SYSTEMS

BEGIN, END = "<!-- peers:begin -->", "<!-- peers:end -->"
Results = dict[str, dict[str, list[float]]]  # system key -> metric -> one value per repetition


@dataclass(frozen=True)
class Metric:
    key: str
    title: str
    unit: str
    higher_is_better: bool
    limit: str  # system key whose figure is the limit ("raw" or "bare")


METRICS = [
    Metric("dispatch", "dispatch, one call per task", "tasks/s", True, "raw"),
    Metric("dispatch_many", "dispatch in batches of 100", "tasks/s", True, "raw"),
    Metric("drain", "drain by one worker process", "tasks/s", True, "raw"),
    Metric("worker_cpu", "worker CPU per task", "µs", False, "bare"),
    Metric("redis_cpu", "redis-server CPU per task drained", "µs", False, "bare"),
    Metric("p50", "latency p50 at 500 tasks/s", "ms", False, "bare"),
    Metric("p99", "latency p99 at 500 tasks/s", "ms", False, "bare"),
    Metric("idle_p50", "latency p50, idle (a task every 50 ms)", "ms", False, "bare"),
    Metric("idle_p99", "latency p99, idle (a task every 50 ms)", "ms", False, "bare"),
]
RAW_LABELS = {"dispatch": "raw XADD, one round trip each", "dispatch_many":
              "raw XADD, pipelined by 100", "drain": "raw XREADGROUP COUNT 100 + XACK, no job"}


def median(values: list[float]) -> float:
    return statistics.median(values)


def fmt(value: float, unit: str) -> str:
    if unit == "tasks/s":
        return f"{value:,.0f}"
    if unit == "µs":
        return f"{value:,.0f}"
    return f"{value:.2f}"


AGAINST = "@against"  # suffix of a system's key when run from `peers.py --against`'s checkout


def against_key(system: str) -> str:
    return system + AGAINST


def label(system: str, metric: str) -> str:
    if system == "raw":
        return RAW_LABELS[metric]
    if system.endswith(AGAINST):
        return BY_KEY[system.removesuffix(AGAINST)].label + " (--against checkout)"
    return BY_KEY[system].label


def shown_systems(results: Results) -> list[str]:
    """The keys of the table's rows in order: raw, then each system (and its --against run)."""
    return ["raw", *(key for system in BY_KEY for key in (system, against_key(system))
                     if key in results)]


def best_peer(results: Results, metric: Metric) -> float | None:
    values = [median(results[s.key][metric.key]) for s in SYSTEMS
              if s.peer and metric.key in results.get(s.key, {})]
    if not values:
        return None
    return max(values) if metric.higher_is_better else min(values)


def rows(results: Results, metric: Metric) -> list[list[str]]:
    limit_values = results.get(metric.limit, {}).get(metric.key)
    limit = median(limit_values) if limit_values else None
    peer = best_peer(results, metric)
    out = []
    for system in shown_systems(results):
        values = results.get(system, {}).get(metric.key)
        if not values:
            continue
        mid = median(values)
        spread = f"{fmt(min(values), metric.unit)}–{fmt(max(values), metric.unit)}"
        paired = results.get(system, {}).get(f"{metric.key}_vs_raw")
        if paired:  # timed against raw XADD in alternating chunks by the same producer
            vs_limit = f"{median(paired):.2f}×"
        else:
            vs_limit = f"{mid / limit:.2f}×" if limit else ""
        vs_peer = f"{mid / peer:.2f}×" if peer else ""
        out.append([f"{metric.title} ({metric.unit})", label(system, metric.key),
                    fmt(mid, metric.unit), spread, vs_limit, vs_peer])
    return out


def table(results: Results) -> str:
    """One Markdown table: every metric, every system, with both ratios."""
    header = ["figure", "system", "median", "min–max", "÷ limit", "÷ best peer"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for metric in METRICS:
        for row in rows(results, metric):
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def write_section(path: Path, body: str, *, begin: str = BEGIN, end: str = END,
                  title: str = "Peers") -> None:
    """Replace only the text between the markers (adding them, or the file, if missing)."""
    BEGIN, END = begin, end  # noqa: N806 - the markers of this section
    span = f"{BEGIN}\n{body.rstrip()}\n{END}"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# Benchmarks\n\n## {title}\n\n{span}\n", encoding="utf-8")
        return
    text = path.read_text(encoding="utf-8")
    start, end = text.find(BEGIN), text.find(END)
    if start == -1 or end == -1 or end < start:
        text = text.rstrip() + f"\n\n## {title}\n\n{span}\n"
    else:
        text = text[:start] + span + text[end + len(END):]
    path.write_text(text, encoding="utf-8")


def _ratio(results: Results, system: str, metric: str, other: float | None) -> float | None:
    values = results.get(system, {}).get(metric)
    if not values or not other:
        return None
    return median(values) / other


def _med(results: Results, system: str, metric: str) -> float | None:
    values = results.get(system, {}).get(metric)
    return median(values) if values else None


def targets(results: Results) -> str:
    """The performance issue's targets (its third round), each with the figure this run
    measured and met / missed: one `runtasks` with default options (`-c8`) against the
    best peer and the bare loop, `dispatch` against the best peer's one-call enqueue,
    `dispatch_many` against pipelined raw XADD, and latency."""
    drain_peer = best_peer(results, METRICS[2])
    checks: list[tuple[str, float | None, str, bool | None]] = []

    def at_least(name: str, value: float | None, goal: float, unit: str = "×") -> None:
        checks.append((name, value, f"≥ {goal}{unit}", None if value is None else value >= goal))

    def at_most(name: str, value: float | None, goal: float, unit: str) -> None:
        checks.append((name, value, f"≤ {goal}{unit}", None if value is None else value <= goal))

    bare_cpu = _med(results, "bare", "worker_cpu")
    at_least("drain -c8 (the default pool) ÷ best peer",
             _ratio(results, "taskrunner8", "drain", drain_peer), 2.5)
    at_most("worker CPU/task -c8 ÷ bare loop",
            _ratio(results, "taskrunner8", "worker_cpu", bare_cpu), 1.3, "×")
    # Each producer's rate ÷ raw XADDs timed in the same seconds: the ratio of two such
    # ratios survives the load swings between the blocks of two systems.
    peer_dispatch = max((median(results[s.key]["dispatch_vs_raw"]) for s in SYSTEMS
                         if s.peer and results.get(s.key, {}).get("dispatch_vs_raw")),
                        default=None)
    ours = _med(results, "taskrunner", "dispatch_vs_raw")
    at_least("dispatch -c1 ÷ best peer's one-call enqueue (each ÷ its raw XADD)",
             None if ours is None or not peer_dispatch else ours / peer_dispatch, 1.0)
    at_least("dispatch_many ÷ pipelined raw XADD",
             _med(results, "taskrunner8", "dispatch_many_vs_raw"), 0.5)
    bare_idle = _med(results, "bare", "idle_p99")
    for key, name in (("taskrunner8", "-c8"), ("taskrunner", "-c1")):
        at_most(f"p50 at 500/s {name}", _med(results, key, "p50"), 0.5, " ms")
        at_most(f"p99 at 500/s {name}", _med(results, key, "p99"), 2, " ms")
        idle = _med(results, key, "idle_p99")
        at_most(f"idle p99 {name} − bare loop's ({bare_idle or 0:.2f} ms)",
                None if idle is None or bare_idle is None else idle - bare_idle, 1, " ms")
    lines = ["| target | measured | goal | |", "|---|---|---|---|"]
    for name, value, goal, met in checks:
        shown = "n/a" if value is None else f"{value:.2f}"
        verdict = "n/a" if met is None else ("met" if met else "**missed**")
        lines.append(f"| {name} | {shown} | {goal} | {verdict} |")
    return "\n".join(lines)


# What `against` compares: the figure, whether a higher one is better, and whether the
# bare loop's figure is its yardstick (the dispatch ratios are already ÷ raw XADD).
COMPARED = [("drain", True, True), ("worker_cpu", False, True), ("redis_cpu", False, True),
            ("dispatch_vs_raw", True, False), ("dispatch_many_vs_raw", True, False)]
EVEN = 0.02  # a median ratio within 2% of 1 is shown as even


def against(results: Results) -> str:
    """This checkout's figures ÷ the --against checkout's, repetition by repetition (the
    two ran in the same round, so one round's load falls on both), for each system run
    from both; each figure also ÷ the same round's bare loop, the issue's yardstick."""
    lines = ["| system | figure | this ÷ bare | that ÷ bare | this ÷ that, by repetition | "
             "median | better here |", "|---|---|---:|---:|---|---:|---|"]
    bare = results.get("bare", {})
    for system in BY_KEY:
        ours, theirs = results.get(system, {}), results.get(against_key(system), {})
        for metric, higher_is_better, by_bare_too in COMPARED:
            if not ours.get(metric) or not theirs.get(metric):
                continue
            pairs = _per_rep(ours[metric], theirs[metric])
            if not pairs:
                continue
            by_bare = ["", ""]
            if by_bare_too and _per_rep(ours[metric], bare.get(metric, [])):
                by_bare = [f"{median(_per_rep(side[metric], bare[metric])):.2f}"
                           for side in (ours, theirs)]
            mid = median(pairs)
            lines.append(f"| {BY_KEY[system].label} | {metric} | {by_bare[0]} | {by_bare[1]} | "
                         + " / ".join(f"{r:.2f}" for r in pairs)
                         + f" | {mid:.2f} | {_verdict(mid, higher_is_better)} |")
    return "\n".join(lines)


def _per_rep(values: list[float], others: list[float]) -> list[float]:
    """values[i] ÷ others[i] for each repetition both have (and a nonzero divisor)."""
    return [a / b for a, b in zip(values, others, strict=False) if b]


def _verdict(ratio: float, higher_is_better: bool) -> str:
    if abs(ratio - 1) <= EVEN:
        return "even"
    return "yes" if (ratio > 1) == higher_is_better else "no"
