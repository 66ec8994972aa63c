"""One module per destination, all on ledger.connectors.base.Connector."""
