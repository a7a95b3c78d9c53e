"""The claims atlas: where each paper claim holds, as one static site built from the run index.

An experiment declares :class:`~tdlab.experiments.axes.AtlasAxes` (``Experiment.atlas_axes``, from ``atlas:`` in its
paper package's YAML, :mod:`tdlab.experiments.declared`): the few
config fields its claims are most sensitive to, with ranges per profile. ``tdlab atlas run`` turns them
into an ordinary sweep (:mod:`tdlab.atlas.axes`, :mod:`tdlab.sweep`: same run ids, skipping and
resuming), ``tdlab atlas build`` renders the run index into a static site (:mod:`tdlab.atlas.site`,
jinja2 templates beside the run report's), ``tdlab atlas serve`` serves that folder with Python's own
HTTP server.
"""
