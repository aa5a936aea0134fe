"""The fault-injection suite (issue 22): full disks, read-only places, kills, hostile files, bounded in time;
each case one line, exit 2, the previous good output intact."""
