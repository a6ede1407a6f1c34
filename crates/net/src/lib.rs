//! Address classes, interface discovery, connection strings and candidate paths
