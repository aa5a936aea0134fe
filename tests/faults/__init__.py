"""The fault-injection suite: full disks, read-only places, kills, hostile files; bounded in time."""
