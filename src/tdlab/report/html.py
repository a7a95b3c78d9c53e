"""``report.html`` of a run: figures, claims table, findings, measurements, config and environment.

A single static page (figures referenced relatively from ``figures/``), so it opens from disk and
renders in headless Chromium (``scripts/screenshot_report.sh``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml
from jinja2 import Environment, select_autoescape

from tdlab.claims import VERDICTS
from tdlab.report.measurement_tables import measurement_tables
from tdlab.runs import Run, atomic_write

__all__ = ["render_report", "write_report"]

_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>tdlab · {{ s.experiment }} · {{ s.run_id }}</title>
<style>
 body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1100px; color: #222; }
 h1 { font-size: 1.5rem; margin-bottom: .2rem; } .sub { color: #666; margin-top: 0; }
 table { border-collapse: collapse; width: 100%; margin: 1rem 0; font-size: .9rem; }
 th, td { border-bottom: 1px solid #ddd; padding: .35rem .5rem; text-align: left; vertical-align: top; }
 th { background: #f4f4f4; } td.num { font-variant-numeric: tabular-nums; text-align: right; }
 .v-holds, .v-trained { color: #0a7a2f; font-weight: 600; } .v-fails, .v-not-trained { color: #b3261e; font-weight: 600; }
 .v-not-resolved, .v-moved-not-learned { color: #a86400; font-weight: 600; } .v-not-evaluable { color: #777; font-weight: 600; }
 details.group { margin: .4rem 0; } details.group summary { cursor: pointer; padding: .2rem 0; }
 .status-done { color: #0a7a2f; } .status-diverged { color: #b3261e; }
 img { max-width: 100%; border: 1px solid #eee; margin: .5rem 0; }
 pre { background: #f7f7f7; padding: .8rem; overflow-x: auto; font-size: .8rem; }
 .notes li { margin: .3rem 0; }
</style></head><body>
<h1>{{ s.experiment }} — {{ s.figure }}</h1>
<p class="sub">Seed {{ s.paper }} · run <code>{{ s.run_id }}</code> · profile <b>{{ s.profile }}</b> ·
 status <b class="status-{{ s.status }}">{{ s.status }}</b>{% if s.error %} ({{ s.error }}){% endif %}</p>
<p>{{ description }}</p>
{% if readings %}<h2>How this reads the seed</h2><ul class="notes">{% for r in readings %}<li><b>{{ r.where }}</b>: {{ r.paper }} — {{ r.chosen }}{% if r.option %} <small>(option: <code>{{ r.option }}</code>)</small>{% endif %}</li>{% endfor %}</ul>{% endif %}
{% if s.arms %}
<h2>Training health</h2>
<table><tr><th>arm</th><th>status</th><th>initial → final loss (per member)</th><th>reasons</th></tr>
{% for a, h in s.arms.items() %}<tr><td><code>{{ a }}</code></td><td class="v-{{ h.status|replace(' ', '-')|replace(',', '') }}">{{ h.status }}</td>
<td class="num">{% for i in range(h.initial_loss|length) %}{{ "%.4g"|format(h.initial_loss[i]) }} → {{ "%.4g"|format(h.final_loss[i]) }}{% if not loop.last %}; {% endif %}{% endfor %}</td>
<td>{{ h.reasons|join("; ") }}</td></tr>{% endfor %}
</table>{% endif %}
{% for title, groups in [("Paper claims", s.claims or []), ("Sanity checks", s.sanity or [])] %}{% if groups %}
{% set tally = [] %}{% for v in verdicts %}{% set n = groups|selectattr("verdict", "equalto", v)|list|length %}{% if n %}{% set _ = tally.append(n|string ~ " " ~ v) %}{% endif %}{% endfor %}
<h2>{{ title }} <small>({{ tally|join(", ") }})</small></h2>
{% for g in groups %}<details class="group"{% if g.verdict != "holds" %} open{% endif %}>
<summary><span class="v-{{ g.verdict|replace(' ', '-') }}">{{ g.verdict }}</span> <code>{{ g.id }}</code> — {{ g.statement }}
 <small>({{ g.rows|length }} row{{ "s" if g.rows|length != 1 }}{% if g.horizon %}; horizon: {{ g.horizon }}{% endif %}{% if g.stage %}; stage: {{ g.stage }}{% endif %}{% if g.verdict != "holds" and g.cause %}; cause: {{ g.cause }}{% endif %})</small>{% if g.reason %}<br><small>{{ g.reason }}</small>{% endif %}</summary>
<table><tr><th>row</th><th>test</th><th>expected</th><th>measured: mean ± sd, or difference [{{ "%g"|format(100 * (g.rows[0].confidence if g.rows else 0.95)) }}% interval]</th><th>members</th><th>verdict</th></tr>
{% for c in g.rows %}<tr><td><code>{{ c.id }}</code>{% if c.provenance == "ours" %} <small>[ours: shown, does not decide]</small>{% endif %}{% if c.statement != g.statement %}<br><small>{{ c.statement }}</small>{% endif %}</td>
<td>{{ c.test }}{% if c.paired %} (paired){% endif %}</td>
<td class="num">{% if c.test == "compare" %}difference {{ sym[c.relation] }} {{ "-" if c.relation == "lt" else "+" }}{{ c.expected }}{% else %}{{ sym[c.relation] }} {{ "%.4g"|format(c.expected) }} (tol {{ c.tolerance }}){% endif %}</td>
<td class="num">{% if c.test == "compare" %}difference {{ "%+.4g"|format(c.difference if c.difference is not none else c.mean) }}{{ c.unit }}{% else %}{{ "%.4g"|format(c.mean) }} ± {{ "%.2g"|format(c.std) }}{{ c.unit }}{% endif %}{% if c.interval %} [{{ c.interval[0]|bound(-1) }}, {{ c.interval[1]|bound(1) }}]{% endif %}{% if c.reference %}<br><small>{{ c.measured|map("round", 4)|join(", ") }} vs {{ c.reference|map("round", 4)|join(", ") }}</small>{% endif %}{% if c.drift is not none %}<br><small>end drift {{ "%+.3g"|format(c.drift) }}</small>{% endif %}</td>
<td class="num">{% if c.trials %}{{ c.successes }}/{{ c.trials }}{% else %}{{ c.measured[:12]|map("round", 4)|join(", ") }}{% if c.measured|length > 12 %}, … ({{ c.measured|length }} in all){% endif %}{% endif %}</td>
<td class="v-{{ c.verdict|replace(' ', '-') }}">{{ c.verdict }}{% if c.reason %}<br><small>{{ c.reason }}</small>{% endif %}</td></tr>{% endfor %}
</table></details>{% endfor %}{% endif %}{% endfor %}
{% if s.decide %}<h2>Rounds (--decide)</h2>
<p>Looks judged at {{ "%.4g"|format(s.decide.confidence) }} confidence (α = {{ s.decide.alpha }} split over {{ s.decide.looks }} looks);
stopped: {{ s.decide.stopped }}.</p>
<table><tr><th>look</th><th>members per arm</th><th>added</th><th>training length{% if s.decide.first_length %} ({{ s.decide.first_length|list|join(", ") }}){% endif %}</th><th>wall time</th><th>paper groups decided</th><th>more members for</th><th>longer training for</th><th>reference draws (more for)</th></tr>
{% for r in s.decide.rounds %}<tr><td>{{ r.look }}</td><td>{{ r.members }}</td><td>{{ r.added }}</td><td>{% if r.length is defined and r.length is not none %}{{ "%g"|format(r.length) }}{% if r.longer is defined and r.longer %} (longer: every member anew){% endif %}{% else %}—{% endif %}</td><td>{{ "%.0f"|format(r.wall_s) }} s</td>
<td>{{ r.decided }}/{{ r.groups }}</td><td>{{ r.growing|join(", ") }}</td><td>{{ (r.training or [])|join(", ") }}</td><td>{% if r.draws is defined and r.draws is not none %}{{ r.draws }}{% if r.sharpening %} ({{ r.sharpening|join(", ") }}){% endif %}{% else %}—{% endif %}</td></tr>{% endfor %}</table>{% endif %}
{% if s.notes %}<h2>Findings</h2><ul class="notes">{% for n in s.notes %}<li>{{ n }}</li>{% endfor %}</ul>{% endif %}
{% for f in s.figures %}<img src="{{ f }}" alt="{{ f }}">{% endfor %}
{% if s.measurements %}<h2>Measurements</h2>
{% for t in tables %}<table>{% if t.title %}<caption><code>{{ t.title }}</code></caption>{% endif %}<tr><th></th>{% for c in t.columns %}<th><code>{{ c }}</code></th>{% endfor %}</tr>
{% for name, cells in t.rows %}<tr><td><code>{{ name }}</code></td>{% for x in cells %}<td class="num">{{ x }}</td>{% endfor %}</tr>{% endfor %}
</table>{% endfor %}{% if measurements %}<pre>{{ measurements }}</pre>{% endif %}{% endif %}
<h2>Environment</h2>
<table>{% for k, v in env.items() %}<tr><th>{{ k }}</th><td>{{ v }}</td></tr>{% endfor %}
<tr><th>root seed</th><td>{{ s.seed }}</td></tr><tr><th>members</th><td>{{ s.members }}</td></tr>
<tr><th>wall time</th><td>{{ "%.1f"|format(s.wall_time_s or 0) }} s</td></tr></table>
<h2>Config</h2><pre>{{ config }}</pre>
</body></html>
"""

_ENV = Environment(autoescape=select_autoescape(default=True))
# an interval end that is infinite is stored as null (JSON has no infinity): −∞ below, +∞ above
_ENV.filters["bound"] = lambda x, side: ("−∞" if side < 0 else "+∞") if x is None else f"{x:.4g}"


def render_report(
    summary: dict[str, Any],
    config: dict[str, Any],
    description: str = "",
    readings: Sequence[Any] = (),
) -> str:
    """The HTML page for a run's summary and config (its per-arm measurements as tables:
    :func:`~tdlab.report.measurement_tables.measurement_tables`); ``readings``: how the experiment reads the seed
    (each with ``where``, ``paper``, ``chosen`` and ``option``: a :class:`~tdlab.experiments.manifest.Reading` or a
    mapping of those keys)."""
    tables, rest = measurement_tables(summary.get("measurements") or {})
    return _ENV.from_string(_TEMPLATE).render(
        s=summary,
        description=description,
        readings=list(readings),
        sym={"close": "≈", "le": "≤", "ge": "≥", "lt": "<", "gt": ">"},
        verdicts=VERDICTS,
        env=summary.get("env", {}),
        config=yaml.safe_dump(config, sort_keys=False),
        tables=tables,
        measurements=yaml.safe_dump(rest, sort_keys=False, default_flow_style=None) if rest else "",
    )


def write_report(run: Run, summary: dict[str, Any], description: str = "", readings: Sequence[Any] = ()) -> None:
    atomic_write(run.path / "report.html", render_report(summary, run.config, description, readings))
