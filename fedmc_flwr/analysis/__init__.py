"""Reading results: statistics, the paired report and the plots of metrics.csv and sweeps.

Nothing here runs a simulator or a learner; everything reads the files the experiments
write (`fedmc_flwr.results`), so a report can be made on a machine without the run.
"""
