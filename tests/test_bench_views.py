"""bench/views.py still measures what it says on the current API (a tiny trace; no
figure is checked: tests never assert on time)."""

from __future__ import annotations

from bench import views
from bench.fixtures import long_trace


def test_views_reads_pages_of_a_long_trace_through_the_real_app(tmp_path):
    root = tmp_path / "ws"
    long_trace(root, 450)
    figures = views.measure(root, whole=True)
    assert figures["paint_kb"] < figures["whole_kb"]  # the tail, not the whole tree
    assert figures["pages_per_s"] > 0 and figures["pages_per_cpu_s"] > 0
    assert views.show_tail_ms({450: root}, 1)[450] > 0
    squeezed = tmp_path / "squeezed"
    long_trace(squeezed, 450, kept=38)  # a summary: its 409 originals are a fold
    folded = views.folded(squeezed)
    assert folded["paint_kb"] < figures["paint_kb"] and folded["fold_ms"] > 0
