"""A parameter whose requires_grad changed during a step: the error that names it, and the
signal grad() gives its caller, which knows the parameter's name."""


class RequiresGradChanged(RuntimeError):
    """A parameter frozen or unfrozen during a step (by a forward, a hook, another thread). A
    step trains the parameters that require grad as it begins; a plain loop's gradient of one
    that a forward changes holds the microbatches whose backward ran before the change, and the
    schedule orders those otherwise (1F1B gave a weight frozen at the second microbatch the
    first's gradient, as the loop does, GPipe none, silently). So the step fails, naming it,
    before any .grad changes."""

    def __init__(self, name, p):
        how = "unfrozen" if p.requires_grad else "frozen"
        super().__init__(
            f"{name}: its requires_grad changed during the step ({how} in a forward or a hook, "
            "or in another thread): a step trains the parameters that require grad as it "
            "begins, and which microbatches' gradients a plain loop gives one changed in a "
            "forward depends on the order of forwards and backwards, which the schedule "
            "decides; freeze and unfreeze parameters between steps")


class FrozenTarget(Exception):
    """grad() was asked for the gradient of a parameter that no longer requires grad; the
    caller names it (RequiresGradChanged)."""

    def __init__(self, param):
        super().__init__("a parameter no longer requires grad")
        self.param = param
