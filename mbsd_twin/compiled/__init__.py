"""The compiled (numba) backend: the System packed into flat buffers (``compiled_model``,
``nb_flat``), the element kernels (``nb_kernels``, ``nb_joints``, ``nb_curves``, ``nb_contact``),
the saddle-point solve (``nb_solve``), the DOP853 integrator and stepper (``nb_dop853``,
``nb_stepper``, ``fastpath``), the re-initialisation (``nb_config``) and the disk cache
(``nb_cache``, ``warmup``).
"""
