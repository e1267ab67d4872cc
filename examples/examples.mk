# Examples and the demo.
