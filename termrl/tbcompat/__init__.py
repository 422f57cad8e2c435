"""Terminal-Bench compatibility: public task sets build and score offline, unchanged.

Terminal-Bench tasks assume a registry (their Dockerfiles start FROM
``ghcr.io/laude-institute/t-bench/...``) and internet at test time (their
test scripts install uv and pytest). termrl adapts a task on import, records
what it changed in ``Task.adaptations``, and applies it only where it runs —
the task's bytes never change and export writes them back as they were:

    import   adapt.with_adaptations(task)     stand-ins for FROM names, the test kit's spec, notes
    build    SandboxSpec.build_files()        FROM names -> local stand-ins (termrl.sandbox.dockerfile),
                                              recorded installer URLs served offline (sandbox.build_tools)
    test     testphase.prepare_test_phase()   uv + pinned wheels + offline config copied in,
                                              PIP_NO_INDEX / PIP_FIND_LINKS / UV_CONFIG_FILE set;
                                              a finished pytest run ends within a grace period
    check    timing.warn_if_tight(...)        a reference run over 80 % of a timeout

Modules: ``standins`` (which local base image stands in for a name, how
it differs, and the registry mirrors read as Docker Hub), ``scan`` and
``shell`` (what the test scripts download, read as the shell splits them),
``installers`` (what the build context downloads), ``kit`` (fetching and
caching the offline kit on the host), ``runnable`` (what a task asks of the
machine that cannot be met: GPUs, another platform), ``testphase`` and
``pyhooks/`` (the kit and the exit-grace hooks at test time). The ``termrl tbcompat`` commands live in ``pipelines/tbcompat_cli.py``,
above ``termrl.taskfolders``, whose folder reader they use.

``tbcompat`` builds on ``termrl.sandbox`` (base images, build tools), never the
other way round. Nothing is imported here; import the submodules directly.
"""

__all__: list[str] = []
