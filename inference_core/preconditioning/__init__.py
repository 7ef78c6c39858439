"""Preconditioning and start tools shared by `auto` and the methods: Pathfinder's Gaussian and its whitening
(`pathfinder`), the separated modes its paths settle in (`modes`) and the neural transport fitted on top
(`transport`). `methods.auto` and the particle/generative bases import them from here."""
