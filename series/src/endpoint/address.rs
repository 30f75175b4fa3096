//! The endpoint address from a plug-in's variables: `<PREFIX>_PORT` (a TCP port, 1..65535)
//! and `<PREFIX>_LOCAL` (a boolean word: true binds 127.0.0.1, false or unset 0.0.0.0).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use nixl_telemetry_base::env::{parse_bool, parse_u64, Lookup};

/// Reads the port variable `port_var` (default `default_port`) and the local-only variable
/// `local_var` through `env`. Errors name the variable and the value.
pub fn address_from_env(
    env: Lookup,
    port_var: &str,
    local_var: &str,
    default_port: u16,
) -> Result<SocketAddr, String> {
    let port = match env(port_var).map_err(|e| e.message)? {
        None => default_port,
        Some(v) => {
            let n = parse_u64(port_var, &v).map_err(|e| e.message)?;
            match u16::try_from(n) {
                Ok(p) if p > 0 => p,
                _ => {
                    return Err(format!(
                        "{port_var}='{v}' is out of range: use a TCP port from 1 to 65535"
                    ))
                }
            }
        }
    };
    let local = match env(local_var).map_err(|e| e.message)? {
        None => false,
        Some(v) => parse_bool(local_var, &v).map_err(|e| e.message)?,
    };
    let ip = if local {
        Ipv4Addr::LOCALHOST
    } else {
        Ipv4Addr::UNSPECIFIED
    };
    Ok(SocketAddr::new(IpAddr::V4(ip), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(pairs: &[(&str, &str)]) -> std::result::Result<SocketAddr, String> {
        let env = nixl_telemetry_base::env::fixed_env(pairs);
        address_from_env(&env, "P_PORT", "P_LOCAL", 9090)
    }

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(addr(&[]).unwrap(), "0.0.0.0:9090".parse().unwrap());
        assert_eq!(
            addr(&[("P_PORT", "9100"), ("P_LOCAL", "YES")]).unwrap(),
            "127.0.0.1:9100".parse().unwrap()
        );
        assert_eq!(
            addr(&[("P_PORT", "0x2382"), ("P_LOCAL", "off")]).unwrap(),
            "0.0.0.0:9090".parse().unwrap()
        );
        assert_eq!(addr(&[("P_PORT", "65535")]).unwrap().port(), 65535);
    }

    #[test]
    fn invalid_values_name_the_variable() {
        for (pairs, text) in [
            (&[("P_PORT", "70000")][..], "P_PORT='70000' is out of range"),
            (&[("P_PORT", "0")][..], "P_PORT='0' is out of range"),
            (
                &[("P_PORT", "-1")][..],
                "P_PORT='-1' is not an unsigned integer",
            ),
            (&[("P_PORT", "90 90")][..], "P_PORT='90 90'"),
            (&[("P_PORT", "")][..], "P_PORT=''"),
            (
                &[("P_LOCAL", "maybe")][..],
                "P_LOCAL='maybe' is not a boolean",
            ),
        ] {
            let e = addr(pairs).unwrap_err();
            assert!(e.contains(text), "{pairs:?}: {e}");
        }
    }
}
