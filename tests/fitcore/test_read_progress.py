"""fitcore.read.Progress: quiet for a fast load, one line a second at most for a slow one."""

from __future__ import annotations

from fitcore import read


def test_progress_is_quiet_for_the_first_second_then_at_most_once_a_second() -> None:
    now = [0.0]
    lines: list[str] = []
    p = read.Progress(lines.append, clock=lambda: now[0])
    p.total = 5_000
    for done, t in [(0, 0.1), (1_000, 0.9), (2_345, 1.2), (2_500, 1.5), (3_000, 2.1),
                    (4_000, 2.3), (4_999, 3.3)]:
        now[0] = t
        p.step(done)
    # 1.2 s: the first line; 1.5 s and 2.1 s: under a second since it; 2.3 s, 3.3 s: lines
    assert lines == ["reading inventory: 2,345 of 5,000 objects ...\n",
                     "reading inventory: 4,000 of 5,000 objects ...\n",
                     "reading inventory: 4,999 of 5,000 objects ...\n"]


def test_progress_writes_nothing_for_a_load_under_a_second() -> None:
    now = [0.0]
    lines: list[str] = []
    p = read.Progress(lines.append, clock=lambda: now[0])
    p.total = 10
    for i in range(10):
        now[0] = i * 0.099
        p.step(i)
    assert lines == []
