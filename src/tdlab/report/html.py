"""``report.html`` of a run: figures, claims table, findings, config and environment.

A single static page (figures referenced relatively from ``figures/``), so it opens from disk and
renders in headless Chromium (``scripts/screenshot_report.sh``).
"""

from __future__ import annotations

from typing import Any

import yaml
from jinja2 import Environment, select_autoescape

from tdlab.runs import Run, atomic_write

__all__ = ["write_report", "render_report"]

_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>tdlab · {{ s.experiment }} · {{ s.run_id }}</title>
<style>
 body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1100px; color: #222; }
 h1 { font-size: 1.5rem; margin-bottom: .2rem; } .sub { color: #666; margin-top: 0; }
 table { border-collapse: collapse; width: 100%; margin: 1rem 0; font-size: .9rem; }
 th, td { border-bottom: 1px solid #ddd; padding: .35rem .5rem; text-align: left; vertical-align: top; }
 th { background: #f4f4f4; } td.num { font-variant-numeric: tabular-nums; text-align: right; }
 .holds { color: #0a7a2f; font-weight: 600; } .fails { color: #b3261e; font-weight: 600; }
 .status-done { color: #0a7a2f; } .status-diverged { color: #b3261e; }
 img { max-width: 100%; border: 1px solid #eee; margin: .5rem 0; }
 pre { background: #f7f7f7; padding: .8rem; overflow-x: auto; font-size: .8rem; }
 .notes li { margin: .3rem 0; }
</style></head><body>
<h1>{{ s.experiment }} — {{ s.figure }}</h1>
<p class="sub">Seed {{ s.paper }} · run <code>{{ s.run_id }}</code> · profile <b>{{ s.profile }}</b> ·
 status <b class="status-{{ s.status }}">{{ s.status }}</b>{% if s.error %} ({{ s.error }}){% endif %}</p>
<p>{{ description }}</p>
{% if s.claims %}
<h2>Claims <small>({{ s.claims_total - s.claims_failed }}/{{ s.claims_total }} hold)</small></h2>
<table><tr><th>claim</th><th>statement</th><th>expected</th><th>measured (mean ± sd, [min, max])</th><th>tol</th><th>members</th><th>verdict</th></tr>
{% for c in s.claims %}<tr><td><code>{{ c.id }}</code></td><td>{{ c.statement }}</td>
<td class="num">{{ sym[c.relation] }} {{ "%.4f"|format(c.expected) }}</td>
<td class="num">{{ "%.4f"|format(c.mean) }} ± {{ "%.4f"|format(c.std) }} [{{ "%.4f"|format(c.min) }}, {{ "%.4f"|format(c.max) }}]</td>
<td class="num">{{ c.tolerance }}</td><td class="num">{{ c.n_hold }}/{{ c.measured|length }}</td>
<td class="{{ c.verdict }}">{{ c.verdict }}</td></tr>{% endfor %}
</table>{% endif %}
{% if s.notes %}<h2>Findings</h2><ul class="notes">{% for n in s.notes %}<li>{{ n }}</li>{% endfor %}</ul>{% endif %}
{% for f in s.figures %}<img src="{{ f }}" alt="{{ f }}">{% endfor %}
{% if s.measurements %}<h2>Measurements</h2><pre>{{ measurements }}</pre>{% endif %}
<h2>Environment</h2>
<table>{% for k, v in env.items() %}<tr><th>{{ k }}</th><td>{{ v }}</td></tr>{% endfor %}
<tr><th>root seed</th><td>{{ s.seed }}</td></tr><tr><th>members</th><td>{{ s.members }}</td></tr>
<tr><th>wall time</th><td>{{ "%.1f"|format(s.wall_time_s or 0) }} s</td></tr></table>
<h2>Config</h2><pre>{{ config }}</pre>
</body></html>
"""

_ENV = Environment(autoescape=select_autoescape(default=True))


def render_report(summary: dict[str, Any], config: dict[str, Any], description: str = "") -> str:
    """The HTML page for a run's summary and config."""
    return _ENV.from_string(_TEMPLATE).render(
        s=summary,
        description=description,
        sym={"close": "≈", "le": "≤", "ge": "≥"},
        env=summary.get("env", {}),
        config=yaml.safe_dump(config, sort_keys=False),
        measurements=yaml.safe_dump(summary.get("measurements", {}), sort_keys=False, default_flow_style=None),
    )


def write_report(run: Run, summary: dict[str, Any], description: str = "") -> None:
    atomic_write(run.path / "report.html", render_report(summary, run.config, description))
