"""The emulated Strata stack: engine mechanisms, serve and gateway apps, supervisord stack, scenarios,
log synthesis. Used by the demo, the end-to-end tests and the benchmarks; nothing here ships into
an observed process (that is `engine/` itself: instrumentation, ids, span assembly)."""
