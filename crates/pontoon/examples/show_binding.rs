//! Test program: prints the CPUs this rank may run on, after init (which applies
//! `PONTOON_BIND`).

fn main() -> Result<(), pontoon::Error> {
    let universe = pontoon::init()?;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let cpus = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap_or("?")
        .trim();
    println!("rank {} cpus {cpus}", universe.world().rank());
    universe.finalize()
}
