"""What ships into the observed processes (instrument.py), the real engine (llama/) and the emulated stack
(emulator/)."""

if __name__ != "spyglass.engine":  # an editable install puts the checkout's root on sys.path too
    raise ImportError(
        f"import spyglass.engine, not {__name__}: spyglass is one package, and a second copy of "
        "its modules would register every source and metric twice"
    )
