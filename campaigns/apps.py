from django.apps import AppConfig


class CampaignsConfig(AppConfig):
    name = "campaigns"
    verbose_name = "Campaigns and story"

    def ready(self):
        from . import waits

        waits.install()
