//! Link trait and transports (TCP) of pontoon
