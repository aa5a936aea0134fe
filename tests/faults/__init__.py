"""The fault-injection suite (issue 22): each case one line, exit 2, the previous good output kept."""
