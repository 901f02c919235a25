"""What the standalone and the YARN application masters share: the objective a
hyper-parameter search optimises (:mod:`.objective`)."""
