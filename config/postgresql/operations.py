from django.db.backends.postgresql import operations


class DatabaseOperations(operations.DatabaseOperations):
    compiler_module = "config.postgresql.compiler"
