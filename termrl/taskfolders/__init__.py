"""Terminal-Bench task folders: import both layouts into Task objects, export to Harbor.

find_task_folders(paths)   the task folders under each path (a task or a tree of them)
read_task_folder(folder)   one folder -> Task (Harbor or legacy layout), or TaskFormatError
import_task_folders(paths) every folder, with every problem collected
export_task(task, out_dir) Task -> a Harbor folder out_dir/<task.id>/
"""

from termrl.taskfolders.export import export_task, export_tasks
from termrl.taskfolders.read import (
    ImportReport,
    find_task_folders,
    import_task_folders,
    read_task_folder,
)

__all__ = [
    "ImportReport",
    "export_task",
    "export_tasks",
    "find_task_folders",
    "import_task_folders",
    "read_task_folder",
]
