"""The services the sandbox stands in for, one module each, and its control plane.

Each module has its handlers, ``handler(store, request, **path_params)``, and ``ROUTES``; a
route with a target is a service call (counted, rate-limited, faultable), one without is
control. ``sandbox.app`` serves them all.
"""
