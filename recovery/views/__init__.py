"""The console's pages: thin views that fetch with access checks, call a service, redirect."""
