-- Names as a server without the control-character rule stored them (README "Request limits and
-- whole strings"): OSC "set the window title" ended by BEL, CR LF forging a line, ESC [2J clearing
-- the screen, CSI in its 8-bit form (U+009B), RLO (U+202E) reordering what follows.
UPDATE tenants SET name = 'acme' || char(27) || ']0;owned' || char(7) || char(13) || char(10) || 'forged';
UPDATE apps SET display_name = char(27) || '[2JEvil' || char(13) || char(10) || 'forged row' || char(155) || '31m';
UPDATE api_keys SET description = 'billing' || char(27) || '[31m' || char(8238) || 'exe.txt' WHERE tenant_id IS NOT NULL;
UPDATE webhooks SET url = 'https://hooks.example.com/' || char(27) || '[31m' || char(7);
