// The agent's systemd unit, as install-ssh writes it (and as deploy/portplane-agent.service
// shows it with the default settings).

export interface UnitOptions {
  nodeBinary: string;
  installDir: string;
  serviceName: string;
}

export function agentUnit({ nodeBinary, installDir, serviceName }: UnitOptions): string {
  return `# systemd unit for the portplane node agent; written by install-ssh.
[Unit]
Description=portplane agent (forwards the ports its master configures)
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
ExecStart=${nodeBinary} ${installDir}/agent.mjs
# AGENT_MASTER_URL and AGENT_TOKEN: kept out of the command line, where every user could read them.
EnvironmentFile=${installDir}/agent.env
Environment=AGENT_STATE_DIR=/var/lib/${serviceName}
KillSignal=SIGTERM
TimeoutStopSec=20
Restart=always
RestartSec=2

DynamicUser=yes
StateDirectory=${serviceName}
StateDirectoryMode=0700
UMask=0077
# Only what forwarding needs: listening on ports below 1024.
AmbientCapabilities=CAP_NET_BIND_SERVICE
CapabilityBoundingSet=CAP_NET_BIND_SERVICE
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
SystemCallArchitectures=native
SystemCallFilter=@system-service
LimitNOFILE=65536

[Install]
WantedBy=multi-user.target
`;
}
