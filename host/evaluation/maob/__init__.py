"""MAOB (paper §7.1, App. C.1): the Host's plans scored against reference graphs at the
level of the four specialist domains, and the stand-in task set shipped with the project."""
