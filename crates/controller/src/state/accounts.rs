//! Accounts: who a job's use is charged to. A tree in the controller's configuration (account
//! → sub-accounts → users, each account with its shares, which fair share will weigh), and the
//! rule a submit passes before it is proposed: a job names an account its user belongs to, or
//! gets the user's default one. A cluster configured with no accounts takes any account name
//! as a label, as Slurm does without association enforcement.

use std::collections::BTreeMap;

use serde::Deserialize;
use xce_client::types::JobSpec;

/// An account as the configuration gives it (`accounts: {NAME: {shares, users, accounts}}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccountFile {
    /// Its weight against its sibling accounts (default 1); never negative.
    pub shares: Option<i64>,
    /// The users charged to it.
    pub users: Vec<String>,
    /// Its sub-accounts.
    pub accounts: BTreeMap<String, AccountFile>,
}

/// A user as the configuration gives it (`users: {NAME: {default_account}}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UserFile {
    /// The account a job of this user that names none is charged to.
    pub default_account: Option<String>,
}

/// One account of the validated tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub shares: u64,
    /// Its parent; `None` at the top.
    pub parent: Option<String>,
    pub users: Vec<String>,
}

/// The validated tree: every account by name (unique across the tree), and each user's
/// account.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Accounts {
    pub accounts: BTreeMap<String, Account>,
    /// The one account each user is listed in.
    pub user_account: BTreeMap<String, String>,
    /// Each user's default, where the configuration names one.
    pub defaults: BTreeMap<String, String>,
}

/// Default shares of an account that gives none.
pub const DEFAULT_SHARES: u64 = 1;

impl Accounts {
    /// Validates the configuration's tree and users; the error names what is wrong and where.
    pub fn new(
        tree: &BTreeMap<String, AccountFile>,
        users: &BTreeMap<String, UserFile>,
    ) -> Result<Accounts, String> {
        let mut out = Accounts::default();
        for (name, account) in tree {
            out.add(name, account, None)?;
        }
        for (user, file) in users {
            let Some(default) = &file.default_account else {
                continue;
            };
            if !out.accounts.contains_key(default) {
                return Err(format!(
                    "users: {user}: default_account {default:?} is no account in accounts:"
                ));
            }
            out.defaults.insert(user.clone(), default.clone());
        }
        Ok(out)
    }

    fn add(&mut self, name: &str, file: &AccountFile, parent: Option<&str>) -> Result<(), String> {
        let path = match parent {
            Some(p) => format!("accounts: {p}/{name}"),
            None => format!("accounts: {name}"),
        };
        if name.is_empty() || !xce_client::types::name_chars_ok(name) || name.len() > 64 {
            return Err(format!(
                "{path}: an account name is 1 to 64 letters, digits, '-', '_' or '.'"
            ));
        }
        if self.accounts.contains_key(name) {
            return Err(format!(
                "{path}: account {name} is defined twice in the tree"
            ));
        }
        let shares = match file.shares {
            None => DEFAULT_SHARES,
            Some(n) => u64::try_from(n)
                .map_err(|_| format!("{path}: shares must not be negative (got {n})"))?,
        };
        for user in &file.users {
            if let Some(other) = self.user_account.get(user) {
                return Err(format!(
                    "{path}: user {user} is also in account {other}: a user belongs to one \
                     place of the tree"
                ));
            }
            self.user_account.insert(user.clone(), name.to_string());
        }
        self.accounts.insert(
            name.to_string(),
            Account {
                shares,
                parent: parent.map(str::to_string),
                users: file.users.clone(),
            },
        );
        for (sub, account) in &file.accounts {
            self.add(sub, account, Some(name))?;
        }
        Ok(())
    }

    /// Charges `spec` to an account: with none configured, any account it names, as a label;
    /// else the one it names, which must exist and hold its user (or any, for a job that names
    /// no user: authentication is off), or, naming none, its user's default (else the
    /// account that lists its user). `defaults_allowed` is false while the cluster runs a
    /// version that cannot store an account: the job then gets none rather than a refusal for
    /// an account nobody asked for.
    pub fn charge(&self, spec: &mut JobSpec, defaults_allowed: bool) -> Result<(), String> {
        if self.accounts.is_empty() {
            return Ok(());
        }
        if spec.account.is_empty() {
            if !defaults_allowed || spec.user.is_empty() {
                return Ok(());
            }
            let default = self
                .defaults
                .get(&spec.user)
                .or_else(|| self.user_account.get(&spec.user));
            return match default {
                Some(account) => {
                    spec.account = account.clone();
                    Ok(())
                }
                None => Err(format!(
                    "account: user {} is in no account of this cluster (accounts: in the \
                     controllers' configuration)",
                    spec.user
                )),
            };
        }
        let Some(account) = self.accounts.get(&spec.account) else {
            return Err(format!(
                "account: no account named {:?} (known: {})",
                spec.account,
                self.accounts.keys().cloned().collect::<Vec<_>>().join(", ")
            ));
        };
        if !spec.user.is_empty() && !self.may_charge(&spec.user, &spec.account, account) {
            return Err(format!(
                "account: user {} may not charge account {}",
                spec.user, spec.account
            ));
        }
        Ok(())
    }

    /// Whether `user` may charge `name`: it is listed there, or it is its default.
    fn may_charge(&self, user: &str, name: &str, account: &Account) -> bool {
        account.users.iter().any(|u| u == user)
            || self.defaults.get(user).is_some_and(|d| d == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(yaml: &str) -> Result<Accounts, String> {
        #[derive(Deserialize)]
        struct File {
            #[serde(default)]
            accounts: BTreeMap<String, AccountFile>,
            #[serde(default)]
            users: BTreeMap<String, UserFile>,
        }
        let f: File = serde_yaml::from_str(yaml).map_err(|e| e.to_string())?;
        Accounts::new(&f.accounts, &f.users)
    }

    const DEPARTMENT: &str = "accounts:
  physics:
    shares: 40
    users: [alice]
    accounts:
      theory: {shares: 10, users: [bob]}
  chemistry: {shares: 60, users: [carol]}
users:
  bob: {default_account: physics}
";

    fn spec(user: &str, account: &str) -> JobSpec {
        JobSpec {
            user: user.into(),
            account: account.into(),
            ..JobSpec::default()
        }
    }

    #[test]
    fn a_tree_names_every_account_once_and_each_user_in_one_place() {
        let a = tree(DEPARTMENT).unwrap();
        assert_eq!(a.accounts["theory"].parent.as_deref(), Some("physics"));
        assert_eq!(a.accounts["chemistry"].shares, 60);
        assert_eq!(a.user_account["bob"], "theory");
        let twice = "accounts:\n  a: {users: [alice]}\n  b: {accounts: {c: {users: [alice]}}}\n";
        assert_eq!(
            tree(twice).unwrap_err(),
            "accounts: b/c: user alice is also in account a: a user belongs to one place of the tree"
        );
        assert_eq!(
            tree("accounts:\n  a: {shares: -3}\n").unwrap_err(),
            "accounts: a: shares must not be negative (got -3)"
        );
        assert_eq!(
            tree("accounts:\n  a: {accounts: {a: {}}}\n").unwrap_err(),
            "accounts: a/a: account a is defined twice in the tree"
        );
        assert_eq!(
            tree("accounts:\n  a: {}\nusers:\n  bob: {default_account: b}\n").unwrap_err(),
            "users: bob: default_account \"b\" is no account in accounts:"
        );
        assert!(tree("accounts:\n  a: {sharez: 1}\n")
            .unwrap_err()
            .contains("sharez"));
    }

    #[test]
    fn a_job_is_charged_to_its_account_or_its_user_s_default() {
        let a = tree(DEPARTMENT).unwrap();
        let charged = |user: &str, account: &str| {
            let mut s = spec(user, account);
            a.charge(&mut s, true).map(|()| s.account)
        };
        assert_eq!(charged("alice", ""), Ok("physics".into()));
        // A default named in users: wins over where the user is listed...
        assert_eq!(charged("bob", ""), Ok("physics".into()));
        // ...and both may be charged.
        assert_eq!(charged("bob", "theory"), Ok("theory".into()));
        assert_eq!(
            charged("alice", "chemistry"),
            Err("account: user alice may not charge account chemistry".into())
        );
        assert_eq!(
            charged("alice", "biology"),
            Err("account: no account named \"biology\" (known: chemistry, physics, theory)".into())
        );
        assert!(charged("dave", "")
            .unwrap_err()
            .contains("user dave is in no account"));
        // Below version 13 nothing is filled in.
        let mut s = spec("alice", "");
        a.charge(&mut s, false).unwrap();
        assert_eq!(s.account, "");
        // With no accounts configured, any name is a label.
        let none = Accounts::default();
        let mut s = spec("alice", "anything");
        none.charge(&mut s, true).unwrap();
        assert_eq!(s.account, "anything");
    }
}
