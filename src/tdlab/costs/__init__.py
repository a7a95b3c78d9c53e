"""What ``tdlab batch`` knows of a run's cost before it runs: the quick profiles' measured wall times
(:mod:`~tdlab.costs.quick_times`, a data file a benchmark writes), the ``standard`` profile sized from them
(:mod:`~tdlab.costs.standard`) and each experiment's work as a function of its
config (:mod:`~tdlab.costs.work`: separate trainings, fits of one length, its own count of the work)."""
