"""What seed 000's experiments share: :mod:`.plateau` (the plateau-escape reading and its stage, markov-init's,
read by markov-rank, markov-bridge and markov-icommon), :mod:`.flows` (the canonical model's gradient-flow
experiment, markov-landscape's, which markov-landscape-3d extends), :mod:`.hypotheses` (the hypotheses its
theorems share), :mod:`.cells` (the (p, q) cells markov-bridge and markov-icommon train on) and
:mod:`.low_rank` (markov-rank's rank-one init scales and its trajectory probe)."""
