"""What seed 004's experiments share: :mod:`.training` (the §6.1 synthetic topics' training set-up, objective,
panels and training stage of topics-embed, -wv, -attn, -two-stage), :mod:`.real_text` (the corpus, LDA topics,
encoder, App. G.3's measures and base experiment of topics-real, -real-cooc, -real-two-stage) and :mod:`.lags`
(the two-stage lag readings of topics-two-stage and topics-real-two-stage)."""
