"""What seed 003's in-context experiments share: :mod:`.estimator_stage` (the in-context estimators their probes
measure and the training stage those estimators define) and :mod:`.icl_grid` (the family × k × depth × heads
grid of markov-icl-depth-linear and markov-icl-heads)."""
