"""The tuner (`run_bench.py --tune`): search launch flags for the best goodput under the user's SLO.

    space   the levers and their candidate values (data), coarse trials and the refinement around the best
    plan    which trials fit the time budget by the cost model, and what was cut
    rank    goodput per trial from the stored requests, CIs across repeats, the paired difference to the defaults,
            the winner
    apply   the winner as config.local.env lines, written only on --apply
    driver  the stages of a tune run on top of the benchmark runner (each trial is an arm)
"""
