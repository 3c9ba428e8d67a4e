"""Paired comparisons for the benches: two launchers (or settings) run in alternating
pairs on one machine, and the ratio of their figures is given with a 95 % confidence
interval, so that a difference smaller than the machine's run-to-run noise shows as an
interval that contains 1 rather than as a ratio that looks exact."""
from __future__ import annotations

import math
import statistics

#: Student's t, two-sided 95 %, by degrees of freedom (beyond 30: the normal's 1.96)
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
        16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074,
        23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045,
        30: 2.042}


def paired_ratio(on: list, off: list) -> tuple:
    """(geometric mean of on/off, low, high): the 95 % confidence interval of the pairs'
    mean log ratio (Student's t), back on the ratio scale.

    >>> [round(x, 4) for x in paired_ratio([2.0, 2.2, 2.1], [2.0, 2.0, 2.1])]
    [1.0323, 0.9004, 1.1835]
    """
    logs = [math.log(a / b) for a, b in zip(on, off)]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), float("nan"), float("nan")
    half = T975.get(len(logs) - 1, 1.96) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)
