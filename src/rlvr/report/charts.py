"""Inline SVG charts for the HTML reports: bar charts, line charts, and histogram bins.

Pure functions from numbers to SVG text: a report needs no plotting library and no script.
Any float is safe to draw. Positions are fractions of a finite range computed from halves
(`v/2 - lo/2`), so even -1e308..1e308 never overflows; NaN and infinities are never used as
coordinates (a bar of one is empty and labelled, a line leaves a gap); numbers print short
(`1e+308`, `3e-05`), never as 300 digits.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping, Sequence

SERIES_CLASSES = 8
"""Line colours `s0`..`s7` (the page's CSS); more series reuse them in turn."""
SMOOTH_FROM = 30
"""A smoothed chart draws a series of more points than this as faint points under a bold mean."""
RAW_STYLE, MEAN_STYLE = "stroke-width:1;opacity:.3", "stroke-width:2.4"
"""Inline styles (they win over the page's CSS) of a smoothed series' raw line and its mean."""

Scale = Callable[[float], float]


def number(value: float | None, digits: int = 4, *, small: bool = True) -> str:
    """A number for a table or a label: fixed digits where they read well, else short; with
    `small=False`, a value too small for the digits prints as 0 (a rate in %).

    >>> number(0.25), number(1e308), number(3e-05), number(float("inf")), number(float("nan"))
    ('0.2500', '1e+308', '3e-05', 'inf', '-')
    >>> number(2.8e-14, 2, small=False)
    '0.00'
    """
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return "-"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value != 0 and (abs(value) >= 1e6 or (small and abs(value) < 10.0**-digits)):
        return f"{value:.3g}"
    return f"{value:.{digits}f}"


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _span(values: Sequence[float], *, include: Sequence[float] = ()) -> tuple[float, float]:
    """The finite range of `values` and `include`, widened to a non-empty one."""
    finite = [v for v in (*values, *include) if math.isfinite(v)]
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
    if hi == lo:
        pad = abs(lo) / 2 if lo else 0.5
        lo, hi = lo - pad, hi + pad
    return lo, hi


def _frac(v: float, lo: float, hi: float) -> float:
    """Where finite `v` lies in [lo, hi] (0 at lo, 1 at hi), without overflow for any floats."""
    return (v / 2 - lo / 2) / (hi / 2 - lo / 2)


def _svg_open(width: int, height: int, title: str, caption: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(title)}"><title>{_e(title)}</title>'
        f'<text class="title" x="12" y="18">{_e(_middle(title, int((width - 24) / 7)))}</text>',
        f'<text x="{width / 2}" y="{height - 8}" text-anchor="middle">{_e(caption)}</text>',
    ]


# ---- bars ---------------------------------------------------------------------------------


def bar_chart(
    labels: Sequence[str],
    values: Sequence[float],
    *,
    title: str,
    caption: str = "",
    width: int = 440,
    height: int = 230,
    digits: int = 0,
) -> str:
    """An inline SVG bar chart: negative values hang below the zero line; a value that is not
    finite gets no bar and its text (`-` for NaN, `inf`, `-inf`)."""
    left, right, top, bottom = 12, 12, 40, 44
    texts = [number(v, digits) for v in values]
    drawn = [v if math.isfinite(v) else 0.0 for v in values]
    lo, hi = _span(drawn, include=(0.0,))

    def y(v: float) -> float:
        return top + (height - top - bottom) * (1 - _frac(v, lo, hi))

    slot = (width - left - right) / max(len(drawn), 1)
    parts = _svg_open(width, height, title, caption)
    bar_w = min(slot * 0.8, 60.0)
    small, fits = len(drawn) > 12, max(int(slot / 6.5), 3)
    for i, (label, v, text) in enumerate(zip(labels, drawn, texts)):
        cx = left + (i + 0.5) * slot
        x, y0, y1 = cx - bar_w / 2, y(max(v, 0.0)), y(min(v, 0.0))
        cls = "bar neg" if v < 0 else "bar"
        parts.append(
            f'<rect class="{cls}" x="{x:.1f}" y="{y0:.1f}" width="{bar_w:.1f}" '
            f'height="{max(y1 - y0, 0.5):.1f}"><title>{_e(label)}: {_e(text)}</title></rect>'
        )
        if not small or v or text in ("-", "inf", "-inf"):
            parts.append(f'<text x="{cx:.1f}" y="{y0 - 3:.1f}" text-anchor="middle">{_e(text)}</text>')
        if not small or i % max(len(drawn) // 6, 1) == 0:
            short = label if len(label) <= fits else label[: fits - 1] + "\u2026"
            parts.append(f'<text x="{cx:.1f}" y="{height - bottom + 14}" text-anchor="middle">{_e(short)}</text>')
    zero = y(0.0)
    parts.append(f'<line x1="{left}" x2="{width - right}" y1="{zero:.1f}" y2="{zero:.1f}" stroke="#888"/></svg>')
    return "".join(parts)


def _is_integer(v: float) -> bool:
    return math.isfinite(v) and v == math.floor(v) and abs(v) < 2**53


def histogram_bins(values: Sequence[float], bins: int = 10) -> tuple[list[str], list[float], str]:
    """Counts of `values` per bin: labels (bin starts), counts, and a caption saying what the
    bins are. Integer values get one bar per integer (or bins of whole integers when they span
    more than 40); other values `bins` equal bins spanning at least [0, 1]. Values that are not
    finite are counted in the caption, not in a bin.

    >>> histogram_bins([0.0, 0.05, 0.5, 1.0], bins=2)
    (['0.00', '0.50'], [2.0, 2.0], 'bins of width 0.5 from 0 to 1 (labels: bin start)')
    >>> histogram_bins([0, 2, 2, 3, float("nan")])
    (['0', '1', '2', '3'], [1.0, 0.0, 2.0, 1.0], 'one bar per value; 1 not finite')
    """
    finite = [v for v in values if math.isfinite(v)]
    dropped = f"; {len(values) - len(finite)} not finite" if len(finite) < len(values) else ""
    if finite and all(_is_integer(v) for v in finite):
        labels, counts, caption = _integer_bins([int(v) for v in finite], bins)
        return labels, counts, caption + dropped
    lo, hi = _span(finite, include=(0.0, 1.0))
    counts = [0.0] * bins
    for v in finite:
        counts[min(int(_frac(v, lo, hi) * bins), bins - 1)] += 1
    step = hi / bins - lo / bins
    starts = [lo + i * step for i in range(bins)]
    labels = [f"{s:.2f}" if abs(hi) < 1e4 and abs(lo) < 1e4 else f"{s:.3g}" for s in starts]
    caption = f"bins of width {step:.3g} from {lo:g} to {hi:g} (labels: bin start)"
    return labels, counts, caption + dropped


def _integer_bins(values: Sequence[int], bins: int) -> tuple[list[str], list[float], str]:
    lo, hi = min(0, *values), max(1, *values)
    width = 1 if hi - lo <= 40 else math.ceil((hi - lo + 1) / bins)
    counts = [0.0] * ((hi - lo) // width + 1)
    for v in values:
        counts[(v - lo) // width] += 1
    caption = "one bar per value" if width == 1 else f"bins of {width} values (labels: bin start)"
    return [str(lo + i * width) for i in range(len(counts))], counts, caption


# ---- lines --------------------------------------------------------------------------------


def line_chart(
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    *,
    title: str,
    caption: str = "step",
    width: int = 340,
    height: int = 210,
    include: Sequence[float] = (),
    smooth: bool = False,
) -> str:
    """An inline SVG line chart: one line per series ((xs, ys) pairs), a shared y axis with
    round ticks that spans the finite values and `include` (e.g. (0, 100) for percentages), a
    legend when there are several. Points that are not finite leave a gap and are counted in
    the caption; a line of few points gets a marker on each point. With `smooth`, a series of
    more than `SMOOTH_FROM` points is drawn faint, under its moving mean in bold
    (`moving_mean`), and the caption names the window."""
    names = list(series)
    window = max((smoothing_window(len(ys)) for _, ys in series.values()), default=0) if smooth else 0
    if window:
        caption += f" (faint: each point; bold: mean of the last {window})"
    legend_rows = math.ceil(len(names) / 2) if len(names) > 1 else 0
    left, right, top, bottom = 46, 14, 34 + 13 * legend_rows, 38
    x_lo, x_hi = _span([x for xs, _ in series.values() for x in xs])
    ticks = nice_ticks(*_span([y for _, ys in series.values() for y in ys], include=include))
    y_lo, y_hi = ticks[0], ticks[-1]

    def px(x: float) -> float:
        return left + (width - left - right) * _frac(x, x_lo, x_hi)

    def py(y: float) -> float:
        return top + (height - top - bottom) * (1 - _frac(y, y_lo, y_hi))

    skipped = sum(
        1 for xs, ys in series.values() for x, y in zip(xs, ys) if not (math.isfinite(x) and math.isfinite(y))
    )
    gaps = f"; {skipped} point{'s' if skipped > 1 else ''} not finite (gaps)" if skipped else ""
    parts = _svg_open(width, height, title, caption + gaps)
    for value in ticks:
        y = py(value)
        parts.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{_e(_tick(value))}</text>')
    finite_xs = [x for xs, _ in series.values() for x in xs if math.isfinite(x)]
    for x in dict.fromkeys((min(finite_xs), max(finite_xs)) if finite_xs else ()):  # the first and last step
        parts.append(f'<text x="{px(x):.1f}" y="{height - bottom + 14}" text-anchor="middle">{_e(_tick(x))}</text>')
    room = int((width - 24) / 2 / 6.2) - 3
    for i, name in enumerate(names):
        cls = f"s{i % SERIES_CLASSES}"
        xs, ys = series[name]
        points = list(zip(xs, ys))
        if window and len(points) > SMOOTH_FROM:
            parts.extend(_line(points, cls, name, px, py, markers=False, style=RAW_STYLE))
            mean = list(zip(xs, moving_mean(ys, window)))
            parts.extend(_line(mean, cls, f"{name} (mean of {window})", px, py, markers=False, style=MEAN_STYLE))
        else:
            parts.extend(_line(points, cls, name, px, py, markers=len(points) <= 40))
        if legend_rows:
            lx, ly = 12 + (i % 2) * (width - 24) / 2, 36 + 13 * (i // 2)
            parts.append(
                f'<line class="key {cls}" x1="{lx}" x2="{lx + 14}" y1="{ly - 4}" y2="{ly - 4}"/>'
                f'<text x="{lx + 18}" y="{ly}">{_e(_clip(name, room))}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


def nice_ticks(lo: float, hi: float) -> list[float]:
    """Two to five round values from at most `lo` to at least `hi` (finite, lo < hi); the two
    ends and the middle when the range is too wide for round steps.

    >>> nice_ticks(-0.277, 1.0), nice_ticks(3.64, 4.3), nice_ticks(-1e308, 1e308)
    ([-0.5, 0.0, 0.5, 1.0], [3.5, 3.75, 4.0, 4.25, 4.5], [-1e+308, 0.0, 1e+308])
    """
    half = hi / 2 - lo / 2
    ends = list(dict.fromkeys([lo, lo / 2 + hi / 2, hi]))
    if max(abs(lo), abs(hi)) > 1e300 or half <= 0:
        return ends
    least = 2 * half / 3  # at most three steps
    magnitude = 10.0 ** math.floor(math.log10(least))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= least)
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)  # 100.00000000000001 is 100
    ticks = [_round(k * step, step) for k in range(first, last + 1)]
    if len(ticks) < 2 or any(b <= a for a, b in zip(ticks, ticks[1:])):  # steps below float precision
        return ends
    ticks[0], ticks[-1] = min(ticks[0], lo), max(ticks[-1], hi)  # float error at the ends
    return ticks


def _round(value: float, step: float) -> float:
    """`value` without the float noise of a multiplication (0.30000000000000004 -> 0.3)."""
    short = float(f"{value:.12g}")
    return short if abs(short - value) <= step * 1e-6 else value


def smoothing_window(points: int) -> int:
    """The moving mean's window for a series of `points` (0: too short to smooth): a tenth of
    the series, at least 3.

    >>> smoothing_window(30), smoothing_window(31), smoothing_window(200), smoothing_window(1000)
    (0, 3, 20, 100)
    """
    return max(3, points // 10) if points > SMOOTH_FROM else 0


def moving_mean(values: Sequence[float], window: int) -> list[float]:
    """The mean of each value and the `window - 1` before it (fewer at the start), over the
    finite ones; NaN where there is none (a gap).

    >>> moving_mean([1.0, 3.0, float("nan"), 5.0], 2)
    [1.0, 2.0, 3.0, 5.0]
    """
    out = []
    for i in range(len(values)):
        finite = [v for v in values[max(0, i - window + 1) : i + 1] if math.isfinite(v)]
        out.append(math.fsum(finite) / len(finite) if finite else math.nan)
    return out


def _line(
    points: list[tuple[float, float]], cls: str, name: str, px: Scale, py: Scale, *, markers: bool, style: str = ""
) -> list[str]:
    """A series' polylines (split where a point is not finite) and markers."""
    out: list[str] = []
    run: list[tuple[float, float]] = []
    for x, y in [*points, (math.nan, math.nan)]:
        if math.isfinite(x) and math.isfinite(y):
            run.append((x, y))
            continue
        if len(run) > 1:
            coords = " ".join(f"{px(a):.1f},{py(b):.1f}" for a, b in run)
            styled = f' style="{style}"' if style else ""
            out.append(f'<polyline class="{cls}"{styled} points="{coords}"><title>{_e(name)}</title></polyline>')
        if markers or len(run) == 1:
            out.extend(
                f'<circle class="{cls}" cx="{px(a):.1f}" cy="{py(b):.1f}" r="2.5">'
                f"<title>{_e(name)} at {_e(_tick(a))}: {_e(number(b))}</title></circle>"
                for a, b in run
            )
        run = []
    return out


def _tick(v: float) -> str:
    """An axis label: an integer when it is one, else three significant digits."""
    return str(int(v)) if _is_integer(v) and abs(v) < 1e6 else f"{v:.3g}"


def _clip(text: str, size: int) -> str:
    """The end of `text` in `size` characters (a legend's names differ at the end)."""
    return text if len(text) <= size else "\u2026" + text[-(size - 1) :]


def _middle(text: str, size: int) -> str:
    """`text` in `size` characters, cut in the middle (a title's start and end both matter)."""
    if len(text) <= size:
        return text
    head = (size - 1) // 2
    return text[:head] + "\u2026" + text[len(text) - (size - 1 - head) :]
