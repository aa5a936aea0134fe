"""The output policy: where an output may go, what it may replace, how it is written, one writer at a time.

Torch-free and below every writer (it imports only ``blockspec.errors`` and the standard library):

- ``targets``: ``check_writable_target``, the one check every writer makes before any work;
- ``kinds``: ``OutputKind``, what makes a path an output of one kind (each kind is defined where its
  layout lives, and handed to the check as a value);
- ``atomic_file``: one file written beside and renamed (directories: ``checkpoint/atomic.py``);
- ``staging``: the staging names beside a target, and cleaning up after killed writers;
- ``failures``: an OSError on an output as one line, with the space it needed;
- ``modes``: the modes the umask gives new files and directories;
- ``lock``: one writer per output folder (``folder_lock``), refused naming the holder's pid;
- ``pinned``: a directory opened once, read under a shared lock, retired only after its readers.
"""

from blockspec.outputs.atomic_file import atomic_file, write_atomically
from blockspec.outputs.failures import output_errors
from blockspec.outputs.kinds import OutputKind, directory_kind, file_kind
from blockspec.outputs.modes import apply_umask, current_umask, directory_mode, file_mode
from blockspec.outputs.staging import remove_stale_staging
from blockspec.outputs.targets import LIBRARY_OPTION, OutputExistsError, check_writable_target, same_path

__all__ = ["LIBRARY_OPTION", "OutputExistsError", "OutputKind", "apply_umask", "atomic_file", "check_writable_target",
           "current_umask", "directory_kind", "directory_mode", "file_kind", "file_mode", "output_errors",
           "remove_stale_staging", "same_path", "write_atomically"]
